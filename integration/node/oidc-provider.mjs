// A real OpenID provider for the force-release tests (npm oidc-provider): authorization
// code with PKCE and the device flow, ID tokens signed with the RS256 key in --jwks.
//
//   node oidc-provider.mjs --port P --key-pem FILE --redirect URL [--redirect URL ...]
//
// The signing key is made here (RSA 2048, kid "test-issuer-1") and its private half written
// to --key-pem (PKCS#8), so the tests can also sign tokens with the issuer's own key that
// this provider would never issue (expired, another audience, no role).
//
// Accounts (the login form takes the name; there is no password, this is a test IdP):
//   alice, bob  roles [lock-operator], amr [pwd, otp]   two operators with MFA
//   carol       roles [],              amr [pwd, otp]   no operator role
//   dave        roles [lock-operator], amr [pwd]        an operator without MFA
//   vera        roles [lock-viewer],   amr [pwd, otp]   reads the explorer, acts on nothing
// One public client, `lock-admin` (token_endpoint_auth_method none, PKCE required).
// Prints `ready <issuer>` on stdout once listening on 127.0.0.1.
import http from 'node:http';
import fs from 'node:fs';
import crypto from 'node:crypto';
import { parseArgs } from 'node:util';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';

// The packages are installed (npm ci) in .deps/node-tools, named by LOCK_NODE_TOOLS.
const tools = createRequire(`${process.env.LOCK_NODE_TOOLS}/package.json`);
const { default: Provider } = await import(pathToFileURL(tools.resolve('oidc-provider')));

const { values } = parseArgs({
  options: {
    port: { type: 'string' },
    'key-pem': { type: 'string' },
    redirect: { type: 'string', multiple: true, default: [] },
  },
});
const issuer = `http://127.0.0.1:${values.port}`;
const { privateKey } = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
fs.writeFileSync(values['key-pem'], privateKey.export({ type: 'pkcs8', format: 'pem' }));
const jwks = { keys: [{ ...privateKey.export({ format: 'jwk' }), kid: 'test-issuer-1', alg: 'RS256', use: 'sig' }] };

const ACCOUNTS = {
  alice: { name: 'Alice Operator', roles: ['lock-operator'], amr: ['pwd', 'otp'] },
  bob: { name: 'Bob Operator', roles: ['lock-operator'], amr: ['pwd', 'otp'] },
  carol: { name: 'Carol Developer', roles: [], amr: ['pwd', 'otp'] },
  dave: { name: 'Dave NoMfa', roles: ['lock-operator'], amr: ['pwd'] },
  vera: { name: 'Vera Viewer', roles: ['lock-viewer'], amr: ['pwd', 'otp'] },
};

const provider = new Provider(issuer, {
  jwks,
  clients: [{
    client_id: 'lock-admin',
    token_endpoint_auth_method: 'none',
    application_type: 'web',
    grant_types: ['authorization_code', 'urn:ietf:params:oauth:grant-type:device_code'],
    response_types: ['code'],
    redirect_uris: values.redirect,
  }],
  pkce: { required: () => true },
  // The claims go into the ID token itself: the admin API verifies only that.
  conformIdTokenClaims: false,
  claims: { openid: ['sub', 'amr', 'auth_time'], profile: ['name', 'roles'] },
  features: {
    devInteractions: { enabled: false },
    deviceFlow: { enabled: true },
  },
  async findAccount(_ctx, sub) {
    const account = ACCOUNTS[sub];
    if (!account) return undefined;
    return {
      accountId: sub,
      async claims() {
        return { sub, name: account.name, roles: account.roles };
      },
    };
  },
  ttl: { IdToken: 600, AccessToken: 600, Session: 3600, Grant: 3600, Interaction: 600 },
  // A login interaction only: consent is granted with the login (test IdP).
  interactions: { url: (_ctx, interaction) => `/interaction/${interaction.uid}` },
});
provider.proxy = false;

const page = (uid) => `<!doctype html><html><body><h1>Test IdP sign-in</h1>
<form method="post" action="/interaction/${uid}/login">
<label>User <input name="login" id="login" autofocus></label>
<button type="submit" id="signin">Sign in</button></form></body></html>`;

function body(req) {
  return new Promise((resolve) => {
    let data = '';
    req.on('data', (c) => { data += c; });
    req.on('end', () => resolve(new URLSearchParams(data)));
  });
}

const callback = provider.callback();
const server = http.createServer(async (req, res) => {
  try {
    const m = req.url.match(/^\/interaction\/([^/]+)(\/login)?$/);
    if (!m) return callback(req, res);
    const details = await provider.interactionDetails(req, res);
    if (!m[2]) {
      res.writeHead(200, { 'content-type': 'text/html' });
      return res.end(page(details.uid));
    }
    const login = (await body(req)).get('login');
    const account = ACCOUNTS[login];
    if (!account) {
      res.writeHead(200, { 'content-type': 'text/html' });
      return res.end(page(details.uid).replace('<form', '<p>unknown user</p><form'));
    }
    const grant = new provider.Grant({ accountId: login, clientId: details.params.client_id });
    grant.addOIDCScope(details.params.scope || 'openid');
    const grantId = await grant.save();
    await provider.interactionFinished(req, res, {
      login: { accountId: login, amr: account.amr },
      consent: { grantId },
    }, { mergeWithLastSubmission: false });
  } catch (err) {
    res.writeHead(500, { 'content-type': 'text/plain' });
    res.end(String(err));
  }
});
server.listen(Number(values.port), '127.0.0.1', () => {
  process.stdout.write(`ready ${issuer}\n`);
});
