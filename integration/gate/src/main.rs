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
        /// Faults to cycle through (default: every kind; see faults.rs).
        #[arg(long, value_delimiter = ',', conflicts_with = "no_faults")]
        faults: Vec<Fault>,
        /// No faults at all: the quiet baseline a fault's effects are told from.
        #[arg(long)]
        no_faults: bool,
        /// Seconds between faults.
        #[arg(long, default_value_t = 2)]
        fault_gap: u64,
        /// Debug builds: arbiter bugs to inject (the gate must then fail).
        #[arg(long)]
        inject_bug: Vec<String>,
        /// Percent of holds that stall past their session's TTL before writing.
        #[arg(long, default_value_t = GateOptions::default().stall_percent)]
        stall_percent: u32,
        /// Percent of rounds on the shared class's key (a reader seven times in ten, else
        /// a writer).
        #[arg(long, default_value_t = GateOptions::default().shared_percent)]
        shared_percent: u32,
        /// Percent of rounds on the semaphore class's key (a permit of N, written under on
        /// its own fence).
        #[arg(long, default_value_t = GateOptions::default().sem_percent)]
        sem_percent: u32,
        /// Skip the PostgreSQL reference fence.
        #[arg(long)]
        no_postgres: bool,
        /// Keep the history and logs here (default: a temp folder kept on failure).
        #[arg(long)]
        out: Option<PathBuf>,
        #[arg(long, default_value_t = 7)]
        seed: u64,
    },
    /// Gate rounds, one after another with a new seed each, for `minutes` (bounded: at
    /// most `rounds`); one line per round appended to `log`; stops at the first failure,
    /// whose history is kept.
    Soak {
        #[arg(long, default_value_t = 60)]
        minutes: u64,
        #[arg(long, default_value_t = 120)]
        round_seconds: u64,
        #[arg(long, default_value_t = 100)]
        rounds: u64,
        #[arg(long, default_value = "soak.log")]
        log: PathBuf,
        /// Every round on one environment (arbiter 0 never restarted), with its RSS and
        /// etcd's size read after each round and etcd compacted and defragmented.
        #[arg(long)]
        long_lived: bool,
    },
    /// The gate across shards: a coord cluster and entity shards, two arbiters, workers
    /// under shard moves (add a shard, pin the namespace to it); the history checked per
    /// key (one holder, rising tokens, nothing left held, moves that end).
    Shards {
        /// Seconds of load before, between and after the two moves, each.
        #[arg(long, default_value_t = 20)]
        phase_seconds: u64,
        #[arg(long, default_value_t = 6)]
        workers: usize,
        /// Debug builds: a deliberate bug (the gate must then fail): `shard-fence-off`, the
        /// default (the second arbiter grants without the shard fence), or
        /// `advance-without-coord` (lock-admin's advances take E+1 on their own shard).
        #[arg(long, num_args = 0..=1, default_missing_value = "shard-fence-off")]
        inject_bug: Option<lock_gate::shards::ShardBug>,
        /// Keep the history and logs here.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Moves without their faults (a frozen shard member, a frozen arbiter).
        #[arg(long)]
        no_faults: bool,
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
        Cmd::Shards {
            phase_seconds,
            workers,
            inject_bug,
            out,
            no_faults,
        } => {
            let opts = lock_gate::shards::ShardGateOptions {
                phase: Duration::from_secs(phase_seconds),
                workers,
                inject_bug,
                out_dir: out,
                faults: !no_faults,
                ..Default::default()
            };
            match rt.block_on(lock_gate::shards::run(opts)) {
                Ok(r) => {
                    print!("{}", lock_gate::shards::summary(&r, &r.history));
                    if r.violations.is_empty() && r.moves_ok {
                        std::process::ExitCode::SUCCESS
                    } else {
                        std::process::ExitCode::from(1)
                    }
                }
                Err(e) => {
                    eprintln!("gate shards: {e:#}");
                    std::process::ExitCode::from(2)
                }
            }
        }
        Cmd::Soak {
            minutes,
            round_seconds,
            rounds,
            log,
            long_lived,
        } => {
            let opts = lock_gate::soak::SoakOptions {
                minutes,
                round_seconds,
                rounds,
                long_lived,
            };
            match rt.block_on(lock_gate::soak::soak(&opts, &log)) {
                Ok(true) => std::process::ExitCode::SUCCESS,
                Ok(false) => std::process::ExitCode::from(1),
                Err(e) => {
                    eprintln!("gate soak: {e:#}");
                    std::process::ExitCode::from(2)
                }
            }
        }
        Cmd::Check { dir, steps } => match lock_gate::check_history(&dir, steps) {
            Ok(report) => {
                println!("gate: {}", report.porcupine.line());
                print!("{}", report.summary());
                print_timelines(&dir, &report);
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
            no_faults,
            fault_gap,
            inject_bug,
            stall_percent,
            shared_percent,
            sem_percent,
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
                stall_percent,
                shared_percent,
                sem_percent,
                postgres: !no_postgres,
                out_dir: out,
                seed,
                ..GateOptions::default()
            };
            if no_faults {
                opts.faults.clear();
            } else if !faults.is_empty() {
                opts.faults = faults;
            }
            match rt.block_on(lock_gate::run(&opts)) {
                Ok(report) => {
                    print!("{}", report.summary());
                    print_timelines(&report.dir.join("history"), &report);
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

/// A failing run's keys as pictures (`timeline-<key>.html` beside the history).
fn print_timelines(history_dir: &std::path::Path, report: &lock_gate::GateReport) {
    match lock_gate::write_timelines(history_dir, report) {
        Ok(paths) => {
            for p in paths {
                println!("  timeline: {}", p.display());
            }
        }
        Err(e) => eprintln!("gate: could not draw the timelines: {e:#}"),
    }
}
