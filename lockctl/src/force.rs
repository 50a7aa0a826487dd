//! `lockctl force-release request|approve|list`: the admin API's client (lock-force), and
//! the sign-in `lockctl epoch advance` shares.

use crate::Failure;
use clap::Subcommand;
use lock_force::client::{AdminClient, ClientError, device_sign_in};
use std::path::PathBuf;

#[derive(Subcommand)]
pub enum ForceCmd {
    /// File a request to release KEY's current hold; prints the request id. A second
    /// operator approves it with `approve ID` (or on the approval page).
    Request {
        key: String,
        /// Why (kept with the record and in the audit trail).
        #[arg(long)]
        reason: String,
        /// Also revoke the holder's session: every hold it has ends.
        #[arg(long)]
        revoke_session: bool,
        #[command(flatten)]
        admin: AdminConn,
    },
    /// Approve and execute request ID (never your own).
    Approve {
        id: String,
        #[command(flatten)]
        admin: AdminConn,
    },
    /// Pending requests and the releases executed in the last 24 h.
    List {
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        admin: AdminConn,
    },
}

#[derive(clap::Args)]
pub struct AdminConn {
    /// The admin API (lock-admin).
    #[arg(long, env = "LOCK_ADMIN_URL", default_value = "http://127.0.0.1:8480")]
    pub admin: String,
    /// A file holding your OIDC ID token (or set $LOCK_ID_TOKEN to the token).
    #[arg(long, env = "LOCK_ID_TOKEN_FILE")]
    pub id_token_file: Option<PathBuf>,
    /// Sign in by the device flow: open the printed URL in a browser, enter the code.
    #[arg(long)]
    pub device_login: bool,
}

impl From<ClientError> for Failure {
    fn from(e: ClientError) -> Self {
        match e {
            ClientError::Refused { .. } => Failure::refused(e.to_string()),
            ClientError::Unreachable(_) => Failure::unreachable(e.to_string()),
            ClientError::SignIn(_) => Failure::refused(e.to_string()),
        }
    }
}

pub(crate) async fn client(conn: &AdminConn) -> Result<AdminClient, Failure> {
    let token = if let Some(f) = &conn.id_token_file {
        std::fs::read_to_string(f)
            .map_err(|e| Failure::input(format!("{}: {e}", f.display())))?
            .trim()
            .to_owned()
    } else if let Ok(t) = std::env::var("LOCK_ID_TOKEN") {
        t.trim().to_owned()
    } else if conn.device_login {
        device_sign_in(&conn.admin, |url, code| {
            eprintln!("To sign in, open {url} and enter the code {code}");
        })
        .await?
    } else {
        return Err(Failure::input(
            "no ID token: pass --id-token-file, set LOCK_ID_TOKEN, or use --device-login",
        ));
    };
    Ok(AdminClient::new(&conn.admin, token))
}

pub async fn run(cmd: ForceCmd) -> Result<(), Failure> {
    match cmd {
        ForceCmd::Request {
            key,
            reason,
            revoke_session,
            admin,
        } => {
            let p = client(&admin)
                .await?
                .file(&key, &reason, revoke_session)
                .await?;
            let r = &p.request;
            println!("{}", r.id);
            eprintln!(
                "filed: release {} held by {} (class {}, {}) since revision {}; another operator must approve `{}`",
                r.key, r.hold.spiffe_id, r.hold.class, r.enforcement, r.hold.revision, r.id
            );
            if let Some(w) = &p.warning {
                eprintln!("WARNING: {w}");
            }
            Ok(())
        }
        ForceCmd::Approve { id, admin } => {
            let a = client(&admin).await?.approve(&id).await?;
            let r = &a.executed.record;
            println!(
                "released {} (hold revision {}, holder {}); requested by {}, approved by {}",
                r.key, r.hold_revision, r.holder_spiffe_id, r.requester.name, r.approver.name
            );
            if let Some(w) = &a.warning {
                eprintln!("WARNING: {w}");
            }
            if let Some(e) = &a.executed.session_revoke_error {
                eprintln!("{e}");
            }
            Ok(())
        }
        ForceCmd::List {
            json: as_json,
            admin,
        } => {
            let l = client(&admin).await?.list().await?;
            if as_json {
                println!("{}", serde_json::to_string_pretty(&l).unwrap_or_default());
                return Ok(());
            }
            println!("pending:");
            for p in &l.pending {
                let r = &p.request;
                println!(
                    "  {}  {}  holder {}  class {} ({})  by {}  reason: {}{}",
                    r.id,
                    r.key,
                    r.hold.spiffe_id,
                    r.hold.class,
                    r.enforcement,
                    r.requester.name,
                    r.reason,
                    if p.warning.is_some() {
                        "  [two writers possible]"
                    } else {
                        ""
                    }
                );
            }
            println!("executed (24 h):");
            for r in &l.executed {
                println!(
                    "  {}  {}  by {} + {}  ({})  reason: {}",
                    r.id, r.key, r.requester.name, r.approver.name, r.enforcement, r.reason
                );
            }
            Ok(())
        }
    }
}
