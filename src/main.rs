//! `nilb`: layer-4 load balancer for edge clusters (XDP balancer, GUE, TC
//! second chance). See README.md for the packet path and the operator guide.

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand, ValueEnum};

use nilb::config::Config;
use nilb::daemon::{self, RunOptions};
use nilb::dataplane::{pins, XdpMode};
use nilb::replay::{self, ReplayProgram};
use nilb::tools::{self, TableSource};

/// Default directory for the pinned maps of a running daemon (with the
/// network namespace's name outside the host's: see `dataplane::pins`).
const DEFAULT_PIN_DIR: &str = nilb::dataplane::pins::DEFAULT_PIN_DIR;
/// Default state file of a running daemon.
const DEFAULT_STATE_FILE: &str = nilb::dataplane::pins::DEFAULT_STATE_FILE;

/// Layer-4 load balancer for edge clusters: XDP balancer, GUE encapsulation,
/// TC second chance for established connections.
#[derive(Parser, Debug)]
#[command(name = "nilb", version, about, long_about = None)]
struct Cli {
    /// Log format of the daemon and tools (stderr).
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum LogFormat {
    /// Human-readable `key=value` lines.
    Text,
    /// One JSON object per line.
    Json,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Validate a configuration file and print a summary (exit 0 valid, 2 invalid,
    /// 1 unreadable).
    Check {
        /// YAML configuration file.
        #[arg(short, long)]
        config: PathBuf,
    },
    /// Run the data plane on an interface until SIGINT/SIGTERM; SIGHUP reloads the config.
    Run {
        /// YAML configuration file (re-read on SIGHUP).
        #[arg(short, long)]
        config: PathBuf,
        /// Interface that receives VIP and GUE traffic.
        #[arg(short, long)]
        interface: String,
        /// This node's address, IPv4 or IPv6 as the cluster network
        /// (default: the interface's address the config names as a balancer
        /// or DIP, else its first IPv4 address, or its first global or
        /// unique-local IPv6 address on an IPv6 cluster network).
        #[arg(long)]
        node_address: Option<IpAddr>,
        /// XDP attach mode; generic (skb) mode is much slower and only for
        /// drivers without native XDP.
        #[arg(long, value_enum, default_value_t = XdpMode::Native)]
        xdp_mode: XdpMode,
        /// Directory on bpffs where the maps are pinned for `nilb stats`.
        #[arg(long, default_value = DEFAULT_PIN_DIR)]
        pin_dir: PathBuf,
        /// State file (YAML, rewritten atomically) read by `nilb status`.
        #[arg(long, default_value = DEFAULT_STATE_FILE)]
        state_file: PathBuf,
        /// Threads that run health checks, load scrapes and the metrics server.
        #[arg(long, default_value_t = 1)]
        check_threads: usize,
        /// Prometheus endpoint (`/metrics`); loopback by default, `off` to
        /// disable. Listening beyond loopback must be asked for explicitly.
        #[arg(long, default_value = "127.0.0.1:9700", value_parser = parse_metrics_address)]
        metrics_address: MetricsAddress,
        /// On SIGTERM/SIGINT leave the programs attached and the maps pinned,
        /// so that the next `nilb run` (an upgraded binary) adopts them without
        /// a gap or a moved bucket. Without it, stopping removes everything.
        #[arg(long)]
        keep_dataplane: bool,
    },
    /// Show each service's backends: state, health, weight, bucket shares,
    /// fail-open, and the last reload (from the daemon's state file).
    Status {
        /// State file of the running daemon.
        #[arg(long, default_value = DEFAULT_STATE_FILE)]
        state_file: PathBuf,
        /// Print the raw YAML state instead of tables.
        #[arg(long, conflicts_with = "json")]
        yaml: bool,
        /// Print the state as one line of JSON (schema in docs/operations.md).
        #[arg(long)]
        json: bool,
    },
    /// Show the bucket and first/second hop a client flow maps to.
    Lookup {
        /// YAML configuration file.
        #[arg(short, long)]
        config: PathBuf,
        /// Client address and port, e.g. 192.0.2.1:40000 or
        /// [2001:db8::1]:40000.
        src: SocketAddr,
        /// VIP and port, e.g. 10.0.0.100:80 or [2001:db8::80]:443.
        dst: SocketAddr,
        /// tcp or udp.
        #[arg(value_parser = tools::parse_protocol)]
        protocol: nilb::config::Protocol,
        /// Read the running daemon's table from its pins instead of building
        /// one from the config (the live table carries the move history).
        #[arg(long)]
        live: bool,
        /// Pin directory of the running daemon (with --live).
        #[arg(long, default_value = DEFAULT_PIN_DIR)]
        pin_dir: PathBuf,
        /// Print the answer as one line of JSON (schema in docs/operations.md).
        #[arg(long)]
        json: bool,
    },
    /// Remove nilb's programs from an interface and its pinned maps (after
    /// `run --keep-dataplane` or a crash). Other programs are left alone.
    Cleanup {
        /// Interface nilb ran on.
        #[arg(short, long)]
        interface: String,
        /// Pin directory nilb used.
        #[arg(long, default_value = DEFAULT_PIN_DIR)]
        pin_dir: PathBuf,
    },
    /// Print the counters of the running data plane.
    Stats {
        /// Pin directory of the running daemon.
        #[arg(long, default_value = DEFAULT_PIN_DIR)]
        pin_dir: PathBuf,
        /// Also print counters that are zero.
        #[arg(long)]
        all: bool,
        /// Print every counter as one line of JSON (schema in docs/operations.md).
        #[arg(long)]
        json: bool,
    },
    /// Print the edge filters of the running data plane: every rule with
    /// the packets and bytes it dropped (dry-run rules: would have), and the
    /// sources rate limits dropped most.
    Filters {
        /// Pin directory of the running daemon.
        #[arg(long, default_value = DEFAULT_PIN_DIR)]
        pin_dir: PathBuf,
        /// How many rate-limited sources to list (most dropped first).
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=10000))]
        top: u32,
        /// Print everything as one line of JSON (schema in docs/operations.md).
        #[arg(long)]
        json: bool,
    },
    /// Print the live tables of the running data plane: per service the
    /// backends' bucket shares and, with --buckets or --json, every bucket
    /// (first hop, second hop, counter slot, move time).
    Tables {
        /// Pin directory of the running daemon.
        #[arg(long, default_value = DEFAULT_PIN_DIR)]
        pin_dir: PathBuf,
        /// Also list every bucket.
        #[arg(long)]
        buckets: bool,
        /// Print everything as one line of JSON (schema in docs/operations.md).
        #[arg(long)]
        json: bool,
    },
    /// Probe this kernel for the features nilb uses, say which are on and off (with
    /// the first Linux release that has each), and load the BPF programs without
    /// attaching them (exit 0 if they load, 1 if not).
    Features {
        /// Print the report as one line of JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run each packet of a pcap through the real BPF program (BPF_PROG_TEST_RUN)
    /// and report verdicts, counters and resulting packets.
    Replay {
        /// YAML configuration file (fills the maps as the daemon would).
        #[arg(short, long)]
        config: PathBuf,
        /// Input capture (Ethernet link type).
        #[arg(long)]
        pcap: PathBuf,
        /// Where to write the resulting (not dropped) packets.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Which program to run.
        #[arg(long, value_enum)]
        program: ReplayProgram,
        /// The node to act as (default: the first balancer).
        #[arg(long)]
        node_address: Option<IpAddr>,
        /// Interface the packets arrive on, so routes and neighbours answer as
        /// on the node (default: loopback, where FIB lookups take the slow path).
        #[arg(long)]
        interface: Option<String>,
    },
}

/// `--metrics-address`: a socket address, or `off`.
#[derive(Clone, Debug)]
struct MetricsAddress(Option<std::net::SocketAddr>);

fn parse_metrics_address(s: &str) -> Result<MetricsAddress, String> {
    if s == "off" {
        return Ok(MetricsAddress(None));
    }
    s.parse()
        .map(|a| MetricsAddress(Some(a)))
        .map_err(|e| format!("`{s}` is not an address:port or `off`: {e}"))
}

/// ifindex of an interface, with a readable error.
fn ifindex(name: &str) -> Result<u32> {
    nix::net::if_::if_nametoindex(name).with_context(|| format!("no interface named {name}"))
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn main() -> ExitCode {
    // A SIGHUP before the daemon's handlers exist must not kill it (the
    // config it is about to read is the newest anyway).
    let _ = signal_hook::flag::register(
        signal_hook::consts::SIGHUP,
        std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false)),
    );
    let cli = Cli::parse();
    init_logging(cli.log_format);
    // libbpf's messages through the logger, in the chosen format.
    nilb::dataplane::libbpf_log::install();
    let format = cli.log_format;
    match dispatch(cli.command, format) {
        Ok(code) => code,
        // `nilb tables --json | head`: the reader went away; nothing to report.
        Err(e)
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) =>
        {
            ExitCode::SUCCESS
        }
        Err(e) => {
            match format {
                LogFormat::Text => {
                    let _ = writeln!(std::io::stderr(), "nilb: error: {e:#}");
                }
                LogFormat::Json => tracing::error!(error = %format!("{e:#}"), "nilb: error"),
            }
            ExitCode::from(1)
        }
    }
}

/// Report an invalid configuration on stderr: the text report, or with
/// `--log-format json` one JSON line per problem (path, line, column,
/// message) after a summary line.
fn report_invalid(file: &std::path::Path, e: &nilb::config::ConfigError, format: LogFormat) {
    match format {
        LogFormat::Text => {
            let _ = writeln!(std::io::stderr(), "{}: {e}", file.display());
        }
        LogFormat::Json => {
            let file = file.display().to_string();
            tracing::error!(%file, problems = e.problems.len(), "invalid configuration");
            for p in &e.problems {
                let (line, column) = p.position.map_or((0, 0), |p| (p.line, p.column));
                tracing::error!(%file, path = %p.path, line, column, "{}", p.message);
            }
        }
    }
}

fn dispatch(command: Command, format: LogFormat) -> Result<ExitCode> {
    let mut stdout = std::io::stdout().lock();
    match command {
        Command::Check { config } => {
            match nilb::config::open_regular_file(&config).and_then(|mut f| {
                let mut s = String::new();
                std::io::Read::read_to_string(&mut f, &mut s).map(|_| s)
            }) {
                Err(e) => {
                    match format {
                        LogFormat::Text => {
                            let _ = writeln!(
                                std::io::stderr(),
                                "cannot read {}: {e}",
                                config.display()
                            );
                        }
                        LogFormat::Json => {
                            tracing::error!(file = %config.display(), error = %e, "cannot read the configuration")
                        }
                    }
                    Ok(ExitCode::FAILURE)
                }
                Ok(src) => match Config::parse(&src).and_then(|c| {
                    c.check_paths_against(&config)?;
                    Ok(c)
                }) {
                    Ok(c) => {
                        // The list files the filters name: read, checked and
                        // compiled before anything is printed, so that a bad list
                        // never follows "configuration valid".
                        let mut filters = Vec::new();
                        match nilb::filter_report::check_filters(&c, &config, &mut filters)? {
                            Ok(_) => {
                                tools::check_summary(&c, &mut stdout)?;
                                stdout.write_all(&filters)?;
                                Ok(ExitCode::SUCCESS)
                            }
                            Err(e) => {
                                let _ = writeln!(std::io::stderr(), "{}: {e}", config.display());
                                Ok(ExitCode::from(2))
                            }
                        }
                    }
                    Err(e) => {
                        report_invalid(&config, &e, format);
                        Ok(ExitCode::from(2))
                    }
                },
            }
        }
        Command::Run {
            config,
            interface,
            node_address,
            xdp_mode,
            pin_dir,
            state_file,
            check_threads,
            metrics_address,
            keep_dataplane,
        } => {
            daemon::run(&RunOptions {
                config,
                interface,
                node_address,
                xdp_mode,
                pin_dir: pins::pin_dir_for(&pin_dir),
                state_file: pins::state_file_for(&state_file),
                check_threads,
                metrics_address: metrics_address.0,
                keep_dataplane,
            })?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Status {
            state_file,
            yaml,
            json,
        } => {
            let status = nilb::status::Status::read(&pins::state_file_for(&state_file))?;
            if yaml {
                write!(stdout, "{}", serde_yaml::to_string(&status)?)?;
            } else if json {
                writeln!(stdout, "{}", status.to_json()?)?;
            } else {
                status.print(&mut stdout)?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Lookup {
            config,
            src,
            dst,
            protocol,
            live,
            pin_dir,
            json,
        } => {
            let c = Config::load(&config)?;
            let pin_dir = pins::locate(&pins::pin_dir_for(&pin_dir));
            let source = if live {
                TableSource::Live(&pin_dir)
            } else {
                TableSource::Config
            };
            let mut r = tools::lookup_report(&c, src, dst, protocol, source)?;
            // Edge filters match IPv4 sources only.
            if let (SocketAddr::V4(src), SocketAddr::V4(dst)) = (src, dst) {
                r.filters = nilb::filter_report::lookup_filters(
                    &c,
                    &config,
                    src,
                    dst,
                    protocol,
                    live.then_some(pin_dir.as_path()),
                )?;
            }
            if json {
                tools::write_json(&r, &mut stdout)?;
            } else {
                tools::print_lookup(&c, &r, &mut stdout)?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Cleanup { interface, pin_dir } => {
            let pin_dir = pins::locate(&pins::pin_dir_for(&pin_dir));
            let done = nilb::dataplane::cleanup(ifindex(&interface)? as i32, &pin_dir)?;
            if done.is_empty() {
                writeln!(
                    stdout,
                    "nothing of nilb's on {interface} or under {}",
                    pin_dir.display()
                )?;
            }
            for line in done {
                writeln!(stdout, "{line}")?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Stats { pin_dir, all, json } => {
            let pin_dir = pins::locate(&pins::pin_dir_for(&pin_dir));
            if json {
                tools::write_json(&tools::stats_report(&pin_dir)?, &mut stdout)?;
            } else {
                tools::stats(&pin_dir, all, &mut stdout)?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Filters { pin_dir, top, json } => {
            if json {
                tools::write_json(
                    &nilb::filter_report::filters_report(&pin_dir, top as usize)?,
                    &mut stdout,
                )?;
            } else {
                nilb::filter_report::filters(&pin_dir, top as usize, &mut stdout)?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Tables {
            pin_dir,
            buckets,
            json,
        } => {
            let pin_dir = pins::locate(&pins::pin_dir_for(&pin_dir));
            if json {
                tools::write_json(&tools::tables_report(&pin_dir)?, &mut stdout)?;
            } else {
                tools::tables(&pin_dir, buckets, &mut stdout)?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Features { json } => {
            let r = nilb::dataplane::probe::report();
            if json {
                tools::write_json(&r, &mut stdout)?;
            } else {
                let k = nilb::dataplane::probe::kernel_features();
                write!(stdout, "{}", nilb::features::render_report(&r, k))?;
            }
            stdout.flush()?;
            Ok(if r.object.loaded {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::Replay {
            config,
            pcap,
            out,
            program,
            node_address,
            interface,
        } => {
            let c = Config::load(&config)?;
            let node = match node_address {
                Some(n) => n,
                None => *c
                    .cluster
                    .balancers
                    .first()
                    .context("the config lists no balancer; pass --node-address")?,
            };
            let ifindex = match interface {
                Some(i) => ifindex(&i)?,
                None => 0,
            };
            replay::replay(
                c,
                node,
                program,
                &pcap,
                out.as_deref(),
                ifindex,
                &mut stdout,
            )?;
            stdout.flush()?;
            Ok(ExitCode::SUCCESS)
        }
    }
}
