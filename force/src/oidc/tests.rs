use super::*;
use serde_json::json;

fn settings() -> OidcSettings {
    OidcSettings {
        issuer: "https://idp.example".into(),
        client_id: "lock-admin".into(),
        role_claim: "roles".into(),
        role: "lock-operator".into(),
        viewer_role: "lock-viewer".into(),
        mfa_claim: "amr".into(),
        mfa_values: vec!["otp".into(), "hwk".into()],
        leeway_seconds: 0,
    }
}

#[test]
fn claims_table() {
    let s = settings();
    let alice_as = |access| {
        Ok((
            Operator {
                issuer: "https://idp.example".into(),
                subject: "alice".into(),
                name: "Alice".into(),
            },
            access,
        ))
    };
    let alice = alice_as(Access::Act);
    type Want = Result<(Operator, Access), TokenRefused>;
    let cases: Vec<(&str, Value, Want)> = vec![
        (
            "the viewer role reads only",
            json!({"iss": "https://idp.example", "sub": "alice", "name": "Alice",
                       "roles": ["lock-viewer"], "amr": ["otp"]}),
            alice_as(Access::View),
        ),
        (
            "both roles act",
            json!({"iss": "https://idp.example", "sub": "alice", "name": "Alice",
                       "roles": ["lock-viewer", "lock-operator"], "amr": ["otp"]}),
            alice_as(Access::Act),
        ),
        (
            "a viewer without a second factor",
            json!({"sub": "alice", "roles": ["lock-viewer"], "amr": ["pwd"]}),
            Err(TokenRefused::NoMfa("amr".into(), "otp,hwk".into())),
        ),
        (
            "role list and otp",
            json!({"iss": "https://idp.example", "sub": "alice", "name": "Alice",
                       "roles": ["x", "lock-operator"], "amr": ["pwd", "otp"]}),
            alice.clone(),
        ),
        (
            "role as a space-separated string, hardware key",
            json!({"iss": "https://idp.example", "sub": "alice", "name": "Alice",
                       "roles": "lock-operator other", "amr": ["hwk"]}),
            alice.clone(),
        ),
        (
            "no role claim",
            json!({"sub": "alice", "amr": ["otp"]}),
            Err(TokenRefused::NoRole("lock-operator".into())),
        ),
        (
            "another role only",
            json!({"sub": "alice", "roles": ["lock-operator-readonly"], "amr": ["otp"]}),
            Err(TokenRefused::NoRole("lock-operator".into())),
        ),
        (
            "password only",
            json!({"sub": "alice", "roles": ["lock-operator"], "amr": ["pwd"]}),
            Err(TokenRefused::NoMfa("amr".into(), "otp,hwk".into())),
        ),
        (
            "no amr",
            json!({"sub": "alice", "roles": ["lock-operator"]}),
            Err(TokenRefused::NoMfa("amr".into(), "otp,hwk".into())),
        ),
        (
            "several audiences, issued to another client",
            json!({"sub": "alice", "aud": ["grafana", "lock-admin"], "azp": "grafana",
                       "roles": ["lock-operator"], "amr": ["otp"]}),
            Err(TokenRefused::WrongAudience),
        ),
        (
            "several audiences, issued to us",
            json!({"iss": "https://idp.example", "sub": "alice", "name": "Alice",
                       "aud": ["grafana", "lock-admin"], "azp": "lock-admin",
                       "roles": ["lock-operator"], "amr": ["otp"]}),
            alice.clone(),
        ),
        (
            "empty subject",
            json!({"sub": "", "roles": ["lock-operator"], "amr": ["otp"]}),
            Err(TokenRefused::MissingClaim("sub".into())),
        ),
        (
            "name falls back to email, then subject",
            json!({"iss": "i", "sub": "s1", "email": "s1@x", "roles": ["lock-operator"], "amr": ["otp"]}),
            Ok((
                Operator {
                    issuer: "i".into(),
                    subject: "s1".into(),
                    name: "s1@x".into(),
                },
                Access::Act,
            )),
        ),
    ];
    for (name, claims, want) in cases {
        assert_eq!(check_claims(&claims, &s), want, "{name}");
    }
}

#[test]
fn same_person_is_issuer_and_subject() {
    let a = |iss: &str, sub: &str, name: &str| Operator {
        issuer: iss.into(),
        subject: sub.into(),
        name: name.into(),
    };
    assert!(a("i", "alice", "Alice").same_person(&a("i", "alice", "A. Other name")));
    assert!(!a("i", "alice", "Alice").same_person(&a("i", "bob", "Alice")));
    assert!(!a("i", "alice", "Alice").same_person(&a("j", "alice", "Alice")));
}

#[test]
fn tokens_travel_only_over_tls_or_loopback() {
    for (url, ok) in [
        ("https://idp.example", true),
        ("http://127.0.0.1:8080", true),
        ("http://localhost:8080/realms/x", true),
        ("http://[::1]:9", true),
        ("http://idp.example", false),
        ("http://10.0.0.1:80", false),
        ("ftp://idp", false),
    ] {
        assert_eq!(transport_ok(url), ok, "{url}");
    }
}

#[test]
fn unsigned_and_garbage_tokens_are_refused_before_any_key() {
    let jwks = JwkSet { keys: Vec::new() };
    let s = settings();
    // {"alg":"none","typ":"JWT"} . {"sub":"alice"} . (no signature)
    let none = "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.eyJzdWIiOiJhbGljZSJ9.";
    assert!(matches!(
        verify_with(none, &jwks, &s),
        Err(TokenRefused::Algorithm(_))
    ));
    // HS256 (a shared secret) is never accepted.
    let hs = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJhbGljZSJ9.c2ln";
    assert_eq!(
        verify_with(hs, &jwks, &s),
        Err(TokenRefused::Algorithm("HS256".into()))
    );
    assert_eq!(
        verify_with("not a token", &jwks, &s),
        Err(TokenRefused::Malformed)
    );
}
