//! `gate`: the release gate (`make gate`) and its worker processes.
//!
//! `gate run [--seconds N] ...` brings up 3 etcd members (each in its own network
//! namespace), two arbiters, Envoy with the filter and PostgreSQL, runs worker processes
//! under faults for N seconds, checks the recorded history and prints a summary. Exit 0:
//! no violation; 1: violations (the history folder is printed and kept); 2: the gate
//! itself could not run.

use clap::{Parser, Subcommand};
use lock_gate::{self, GateOptions, faults::Fault};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser)]
#[command(about = "Release gate: recorded histories checked under real faults")]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the gate and print its summary.
    Run {
        /// How long the workers run, faults included.
        #[arg(long, default_value_t = 120)]
        seconds: u64,
        #[arg(long, default_value_t = 3)]
        workers: usize,
        #[arg(long, default_value_t = 3)]
        clients_per_worker: usize,
        /// Faults to cycle through (default: all).
        #[arg(long, value_delimiter = ',')]
        faults: Vec<Fault>,
        /// Seconds between faults.
        #[arg(long, default_value_t = 2)]
        fault_gap: u64,
        /// Debug builds: arbiter bugs to inject (the gate must then fail).
        #[arg(long)]
        inject_bug: Vec<String>,
        /// Skip the PostgreSQL reference fence.
        #[arg(long)]
        no_postgres: bool,
        /// Keep the history and logs here (default: a temp folder kept on failure).
        #[arg(long)]
        out: Option<PathBuf>,
        #[arg(long, default_value_t = 7)]
        seed: u64,
    },
    /// Check a kept history folder again (prints the same summary).
    Check {
        /// The `history` folder of a run.
        dir: PathBuf,
        #[arg(long, default_value_t = GateOptions::default().linearizability_steps)]
        steps: u64,
    },
    /// A worker process (started by `gate run`).
    Worker {
        #[arg(long)]
        plan: PathBuf,
    },
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("gate: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    match args.cmd {
        Cmd::Worker { plan } => {
            let r = std::fs::read_to_string(&plan)
                .map_err(anyhow::Error::from)
                .and_then(|s| Ok(serde_json::from_str(&s)?))
                .and_then(|p| rt.block_on(lock_gate::worker::run(p)));
            match r {
                Ok(()) => std::process::ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("gate worker: {e:#}");
                    std::process::ExitCode::from(2)
                }
            }
        }
        Cmd::Check { dir, steps } => match lock_gate::check_history(&dir, steps) {
            Ok(report) => {
                print!("{}", report.summary());
                if report.passed() {
                    std::process::ExitCode::SUCCESS
                } else {
                    std::process::ExitCode::from(1)
                }
            }
            Err(e) => {
                eprintln!("gate check: {e:#}");
                std::process::ExitCode::from(2)
            }
        },
        Cmd::Run {
            seconds,
            workers,
            clients_per_worker,
            faults,
            fault_gap,
            inject_bug,
            no_postgres,
            out,
            seed,
        } => {
            let mut opts = GateOptions {
                duration: Duration::from_secs(seconds),
                workers,
                clients_per_worker,
                fault_gap: Duration::from_secs(fault_gap),
                inject_bugs: inject_bug,
                postgres: !no_postgres,
                out_dir: out,
                seed,
                ..GateOptions::default()
            };
            if !faults.is_empty() {
                opts.faults = faults;
            }
            match rt.block_on(lock_gate::run(&opts)) {
                Ok(report) => {
                    print!("{}", report.summary());
                    if report.passed() {
                        println!("gate: PASS");
                        std::process::ExitCode::SUCCESS
                    } else {
                        println!("gate: FAIL");
                        std::process::ExitCode::from(1)
                    }
                }
                Err(e) => {
                    eprintln!("gate: could not run: {e:#}");
                    std::process::ExitCode::from(2)
                }
            }
        }
    }
}
