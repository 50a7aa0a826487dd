//! A terminal program as a person sees it: run in a tmux server of its own (a private
//! socket in a temp dir, so nothing touches the user's tmux), keys sent with `send-keys`,
//! the screen read with `capture-pane`. The server is killed on drop.

use std::path::PathBuf;
use std::process::Command;

pub struct Tmux {
    _dir: tempfile::TempDir,
    socket: PathBuf,
}

const SESSION: &str = "t";

impl Tmux {
    /// Starts `command` (a shell command line) in a `width` x `height` terminal.
    pub fn start(command: &str, width: u16, height: u16) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let socket = dir.path().join("tmux.sock");
        let t = Self { _dir: dir, socket };
        let (w, h) = (width.to_string(), height.to_string());
        t.run(&[
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-s",
            SESSION,
            "-x",
            &w,
            "-y",
            &h,
            command,
        ])?;
        Ok(t)
    }

    fn run(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(args)
            .output()?;
        anyhow::ensure!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Sends keys as tmux names them (`s`, `Enter`, `Down`, `q`).
    pub fn send(&self, keys: &[&str]) -> anyhow::Result<()> {
        let mut args = vec!["send-keys", "-t", SESSION];
        args.extend_from_slice(keys);
        self.run(&args).map(drop)
    }

    /// The screen's text now.
    pub fn screen(&self) -> anyhow::Result<String> {
        self.run(&["capture-pane", "-p", "-t", SESSION])
    }

    /// Whether the program still runs (its session ends when it exits).
    pub fn alive(&self) -> bool {
        self.run(&["has-session", "-t", SESSION]).is_ok()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}
