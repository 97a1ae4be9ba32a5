//! flytod: the Flyto daemon. Owns process-level concerns — config, paths,
//! the single-instance lock, the control socket, signals and sd_notify —
//! and wires them to the actors in flyto-actors. Actors never see a
//! connection; only `server` does.

mod api;
mod config;
mod listener;
mod lock;
mod notify;
mod paths;
mod peer;
mod plan_reads;
mod plan_sockets;
mod server;
mod shared_store;

/// jemalloc: the daemon makes many small allocations per request from
/// several threads, and costs less CPU per request with it than with
/// glibc's malloc (ARCHITECTURE.md has the figures).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read once at its first allocation: its background
/// thread gives freed memory back to the system within about a second,
/// also while the daemon sits idle (by default it keeps it for ten
/// seconds, and only notices when it next allocates).
#[unsafe(export_name = "_rjem_malloc_conf")]
static JEMALLOC_CONF: ConfPtr =
    ConfPtr(c"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0".as_ptr());

/// A C string pointer that can be a static: jemalloc reads
/// `const char *malloc_conf`.
#[repr(transparent)]
struct ConfPtr(*const std::ffi::c_char);

// SAFETY: the pointer is to a string literal: immutable, valid forever.
unsafe impl Sync for ConfPtr {}

use anyhow::Context;
use clap::{Parser, Subcommand};
use flyto_actors::clock::OffsetClock;
use flyto_actors::compaction::breaker::{BREAKER_NAME, BreakerActor, BreakerArgs};
use flyto_actors::llm::LlmClient;
use flyto_actors::memory::{MEMORY_MANAGER_NAME, Memory, MemoryArgs, MemoryManager};
use flyto_actors::plans::PlanSockets;
use flyto_actors::plans::{
    PlanConfig, PlanReader, SCHEDULER_NAME, SchedulerActor, SchedulerArgs, SchedulerMsg,
    SledPlanStore, SledPlans,
};
use flyto_actors::session::{
    ManagerMsg, SESSION_MANAGER_NAME, SessionDeps, SessionManager, SledSessionStore,
};
use flyto_actors::store::Store;
use flyto_actors::supervisor::{ChildSpec, Supervisor, SupervisorArgs};
use flyto_actors::tools::Registry;
use flyto_actors::tools::bash::SharedPolicy;
use flyto_actors::{Clock, SystemClock};
use futures_util::StreamExt;
use plan_sockets::DaemonPlanSockets;
use ractor::{Actor, ActorRef};
use signal_hook::consts::{SIGCHLD, SIGHUP, SIGINT, SIGTERM};
use std::path::Path;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(
    name = "flytod",
    version,
    about = "The Flyto agent daemon: runs plans (and, later, agent sessions) for you in the background.",
    after_help = "Paths: state in FLYTO_HOME, $STATE_DIRECTORY, $XDG_STATE_HOME/flyto or ~/.local/state/flyto; \
config in --config, FLYTO_CONFIG, $CONFIGURATION_DIRECTORY/config.toml, $XDG_CONFIG_HOME/flyto/config.toml or \
~/.config/flyto/config.toml; socket in --socket, FLYTO_SOCK, $RUNTIME_DIRECTORY, $XDG_RUNTIME_DIR/flyto or /tmp/flyto-<uid>.\n\
Signals: SIGTERM/SIGINT drain and exit 0; SIGHUP reloads the config.\n\
Exit codes: 0 clean shutdown; 1 could not start (bad config, another instance, socket in use) or actors failed too often."
)]
struct Cli {
    /// Config file (TOML).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// Control socket path.
    #[arg(long)]
    socket: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Check the config file and print where it is; exit 1 if it is invalid
    /// or plans.default_workdir does not exist. Warns about api_key_env
    /// variables that are not set.
    CheckConfig,
    /// Apply the shared PostgreSQL store's schema migrations and exit.
    /// Two nodes migrating at once apply each migration once; a schema
    /// newer than this flytod is refused.
    Migrate {
        /// postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE
        #[arg(
            long,
            env = "FLYTO_DATABASE_URL",
            value_name = "URL",
            hide_env_values = true
        )]
        database_url: String,
        /// Also copy this node's plans from its own (sled) store into the
        /// database, once (flytod must not be running here). Jobs and
        /// sessions stay in the sled store.
        #[arg(long)]
        from_sled: bool,
    },
    /// Started by flytod itself: waits for it to end, then kills the
    /// commands it was still running (see flyto_actors::tools::leftovers).
    #[command(hide = true)]
    GuardRuns { folder: PathBuf },
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Command::CheckConfig) => check_config(&cli),
        Some(Command::Migrate {
            ref database_url,
            from_sled,
        }) => migrate(database_url, from_sled),
        Some(Command::GuardRuns { ref folder }) => {
            init_logging("info");
            flyto_actors::tools::leftovers::guard_main(folder);
            Ok(())
        }
        None => run(&cli),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("flytod: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn migrate(url: &str, from_sled: bool) -> anyhow::Result<()> {
    use flyto_actors::store::postgres::{Shared, migrate};
    // The sled store first: it must not be in use while it is read.
    let sled = if from_sled {
        let state_dir = paths::state_dir();
        let lock = lock::acquire(&state_dir).with_context(|| {
            format!(
                "cannot copy the plans of {}: stop flytod on this node first",
                state_dir.display()
            )
        })?;
        let store = Store::open(&state_dir.join("db"), 64 * 1024 * 1024)?;
        let plans = SledPlanStore::open(store.clone())?;
        let records = flyto_actors::plans::PlanRecords::list(&plans, None, usize::MAX)
            .context("cannot read the plans of the sled store")?;
        let jobs = sled_jobs(store.clone()).context("cannot read the jobs of the sled store")?;
        let sessions =
            sled_sessions(store.clone()).context("cannot read the sessions of the sled store")?;
        let channels = flyto_actors::channels::store::ChannelStore::open(store)
            .and_then(|c| c.export())
            .context("cannot read the channel bindings of the sled store")?;
        Some((state_dir, lock, records, jobs, sessions, channels))
    } else {
        None
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    runtime.block_on(async {
        let shared = Shared::connect(url, "flytod migrate").await?;
        let done = migrate(&shared).await?;
        if done.applied.is_empty() {
            println!(
                "{}: the schema is at version {}; nothing to apply",
                shared.target, done.version
            );
        } else {
            println!(
                "{}: applied migration(s) {:?}; the schema is at version {}",
                shared.target, done.applied, done.version
            );
        }
        if let Some((state_dir, _lock, mut records, jobs, sessions, channels)) = sled {
            // Oldest first, so the new ids keep their order.
            records.reverse();
            let source = format!("{}:{}", shared_store::hostname(), state_dir.display());
            let n = records.len();
            let mut plan_ids = std::collections::HashMap::new();
            match flyto_actors::plans::store::pg_rows::import(&shared, &source, records).await? {
                None => println!(
                    "the plans of {source} were copied into this database before: nothing copied"
                ),
                Some(ids) => {
                    println!("copied {n} plan(s) of {source} (old id -> new id):");
                    for (old, new) in ids {
                        println!("  p{old} -> p{new}");
                        plan_ids.insert(old, new);
                    }
                }
            }
            let n = jobs.len();
            match flyto_actors::jobs::shared::import(&shared, &source, jobs, &plan_ids)
                .await
                .map_err(|r| anyhow::anyhow!(r.message))?
            {
                None => println!(
                    "the jobs of {source} were copied into this database before: nothing copied"
                ),
                Some(copied) => {
                    println!("copied {n} job(s) of {source} (old id -> new id):");
                    for c in copied {
                        print!("  j{} -> j{}", c.old, c.new);
                        match c.name_dropped {
                            Some(name) => println!(
                                " (its name `{name}` is another job's here: copied without a name; `flytoctl job_update j{} --name NAME` gives it one)",
                                c.new
                            ),
                            None => println!(),
                        }
                    }
                }
            }
            let n = sessions.len();
            let mut session_ids = std::collections::HashMap::new();
            match flyto_actors::session::shared::import(&shared, &source, sessions, &plan_ids)
                .await?
            {
                None => println!(
                    "the sessions of {source} were copied into this database before: nothing copied"
                ),
                Some(copied) => {
                    println!("copied {n} session(s) of {source} (old id -> new id):");
                    for c in copied {
                        session_ids.insert(c.old, c.new);
                        print!("  s{} -> s{}", c.old, c.new);
                        match c.name_dropped {
                            Some(name) => println!(
                                " (its name `{name}` is another session's here: copied without a name)"
                            ),
                            None => println!(),
                        }
                    }
                }
            }
            match flyto_actors::channels::shared::import(&shared, &source, channels, &session_ids)
                .await?
            {
                None => println!(
                    "the channel bindings of {source} were copied into this database before: nothing copied"
                ),
                Some(done) => {
                    println!(
                        "copied {} channel binding(s) of {source}{}",
                        done.copied.len(),
                        if done.copied.is_empty() { "" } else { ":" }
                    );
                    for name in &done.copied {
                        println!("  {name}");
                    }
                    for name in &done.taken {
                        println!(
                            "  not copied: {name} (the database has a binding of that name; bind this one again under another: `flytoctl channel_bind ... --name NAME`)"
                        );
                    }
                }
            }
        }
        Ok::<(), anyhow::Error>(())
    })
}

/// A sled store's jobs, each with its fires and the plan counted last.
fn sled_jobs(
    store: Store,
) -> Result<Vec<flyto_actors::jobs::shared::ImportedJob>, flyto_actors::store::StoreError> {
    let jobs = flyto_actors::jobs::model::SledJobStore::open(store)?;
    let mut out = Vec::new();
    for rec in jobs.all()? {
        out.push(flyto_actors::jobs::shared::ImportedJob {
            fires: jobs.read_fires(rec.id)?,
            counted: jobs.counted(rec.id)?,
            rec,
        });
    }
    Ok(out)
}

/// A sled store's sessions, each with its messages and extractions.
fn sled_sessions(
    store: Store,
) -> Result<Vec<flyto_actors::session::shared::ImportedSession>, flyto_actors::store::StoreError> {
    use flyto_actors::session::store::SessionStore;
    let sessions = SledSessionStore::open(store)?;
    let mut out = Vec::new();
    for record in sessions.list()? {
        out.push(flyto_actors::session::shared::ImportedSession {
            messages: sessions.stamped_messages(record.id, 0, u64::MAX)?,
            extractions: sessions.extractions(record.id)?,
            record,
        });
    }
    Ok(out)
}

fn check_config(cli: &Cli) -> anyhow::Result<()> {
    let loaded = config::load(cli.config.as_deref())?;
    let (errors, warnings) = config::check_environment(&loaded.config);
    for w in &warnings {
        eprintln!("flytod: warning: {w}");
    }
    if !errors.is_empty() {
        anyhow::bail!(
            "invalid config file {}: {}",
            loaded.path.display(),
            errors.join("; ")
        );
    }
    if loaded.exists {
        println!("config OK: {}", loaded.path.display());
    } else {
        println!(
            "no config file at {}: defaults apply",
            loaded.path.display()
        );
    }
    Ok(())
}

fn init_logging(level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let under_journal = std::env::var_os("JOURNAL_STREAM").is_some();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(!under_journal && std::io::IsTerminal::is_terminal(&std::io::stderr()));
    if under_journal {
        builder.without_time().init();
    } else {
        builder.init();
    }
}

/// The system clock, or (a test knob) the system clock shifted by
/// `FLYTO_CLOCK_OFFSET_MS`, so tests can move time for the whole daemon.
fn clock_from_env() -> anyhow::Result<Arc<dyn Clock>> {
    const VAR: &str = "FLYTO_CLOCK_OFFSET_MS";
    match std::env::var(VAR) {
        Err(std::env::VarError::NotPresent) => Ok(Arc::new(SystemClock)),
        Err(std::env::VarError::NotUnicode(_)) => {
            anyhow::bail!(
                "{VAR} is not valid UTF-8: unset it, or set it to a whole number of milliseconds"
            )
        }
        Ok(v) => {
            let offset_ms: i64 = v.trim().parse().with_context(|| {
                format!("{VAR}={v:?} is not a whole number of milliseconds (e.g. 3600000 or -60000): fix or unset it")
            })?;
            tracing::warn!(
                offset_ms,
                "{VAR} is set: this daemon's clock is shifted from the system clock (a test setting)"
            );
            Ok(Arc::new(OffsetClock { offset_ms }))
        }
    }
}

/// Step logs of plans on the shared store: apart from the sled store's,
/// since a node removes those of plans the database no longer has.
fn shared_log_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("shared-logs")
}

/// Now, in ms since the epoch (for the node id).
fn clock_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The scheduler of a node on the shared store, under the scheduler's
/// name: it answers the same requests, and its runner claims this node's
/// share of the steps.
fn shared_scheduler_spec(
    reader: &flyto_actors::plans::PgPlans,
    node: &str,
    plan_config: &Arc<RwLock<PlanConfig>>,
    clock: &Arc<dyn Clock>,
    state_dir: &Path,
    sockets: Arc<dyn PlanSockets>,
    hooks: flyto_actors::plans::PlanHooks,
) -> ChildSpec {
    use flyto_actors::plans::cluster::{ProcessLaunch, RunnerConfig};
    use flyto_actors::plans::shared_scheduler::{SharedSchedulerActor, SharedSchedulerArgs};
    let (reader, node, plan_config, clock) = (
        reader.clone(),
        node.to_string(),
        plan_config.clone(),
        clock.clone(),
    );
    let log_dir = shared_log_dir(state_dir);
    ChildSpec {
        name: "scheduler".into(),
        start: Arc::new(move |sup| {
            let config = plan_config
                .read()
                .map(|c| c.clone())
                .unwrap_or_else(|_| PlanConfig::default());
            let launch = Arc::new(ProcessLaunch {
                kill_grace: config.kill_grace,
                log_dir: Some(log_dir.clone()),
                log_max: config.log_max_bytes,
                tail_max: config.output_tail_bytes,
                sockets: sockets.clone(),
                fallback_socket: config.plan_socket.clone(),
                socket_users: Default::default(),
            });
            let args = SharedSchedulerArgs {
                reader: reader.clone(),
                runner: RunnerConfig {
                    node: node.clone(),
                    // This node's share: as many steps as it would run
                    // alone.
                    slots: (config.max_parallel_plans * config.max_parallel_steps).max(1),
                    // As on one machine: a child plan per level of the
                    // depth cap may run beside the steps waiting for it.
                    child_slots: (config.max_parallel_steps * config.max_depth as usize).max(1),
                    // Well inside the 45 s lease; an idle node's cost.
                    sweep_every: Duration::from_secs(15),
                    keeper: Default::default(),
                    plan_ttl: Some(config.plan_ttl),
                    log_dir: Some(log_dir.clone()),
                },
                config,
                clock: clock.clone(),
                launch,
                hooks: Some(hooks.clone()),
            };
            Box::pin(async move {
                let (r, _) = Actor::spawn_linked(
                    Some(SCHEDULER_NAME.into()),
                    SharedSchedulerActor,
                    args,
                    sup,
                )
                .await?;
                Ok(r.get_cell())
            })
        }),
    }
}

/// A memory folder's actor with nothing to do for this long stops.
const MEMORY_IDLE_STOP: std::time::Duration = std::time::Duration::from_secs(300);

fn run(cli: &Cli) -> anyhow::Result<()> {
    // First, before any file exists or any thread runs: whatever umask
    // flytod got, its state is private; its children get that umask back.
    flyto_actors::tools::process::make_files_private();
    let loaded = config::load(cli.config.as_deref())?;
    init_logging(&loaded.config.daemon.log_level);
    flyto_actors::llm::set_config_path(&loaded.path);
    let (errors, warnings) = config::check_environment(&loaded.config);
    for problem in errors.iter().chain(&warnings) {
        tracing::warn!("{problem}");
    }
    if !peer::become_subreaper() {
        tracing::warn!(
            "cannot become a child subreaper (prctl PR_SET_CHILD_SUBREAPER): processes that detach from a step or an agent's tool can reach the control socket"
        );
    }
    flyto_actors::tools::process::raise_open_files_limit();
    // One thread runs the async tasks: they wait on sockets, children and
    // the store, and what computes at length (the file tools, the commit
    // thread, sled) has threads of its own. A second runtime thread mostly
    // added wake-ups between the two: on a 2-vCPU VM it cost about 6% more
    // CPU per acknowledged submit (flyto-bench submit). Still the
    // multi-threaded runtime: `block_in_place` hands its thread over.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(serve(cli, loaded))
}

/// Tells the sandbox what to hide and allow; says so when the kernel
/// cannot confine agents' commands.
fn configure_sandbox(
    config: &config::Config,
    state_dir: &std::path::Path,
    config_path: &std::path::Path,
    socket_path: &std::path::Path,
    support: &flyto_actors::tools::sandbox::Support,
) {
    use flyto_actors::tools::sandbox::{self, Host};
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(std::path::PathBuf::from);
    let abs = |p: std::path::PathBuf| std::fs::canonicalize(&p).unwrap_or(p);
    let mut hidden = vec![abs(state_dir.to_path_buf()), abs(config_path.to_path_buf())];
    hidden.extend(config_path.parent().map(|p| abs(p.to_path_buf())));
    hidden.extend(socket_path.parent().map(|p| abs(p.to_path_buf())));
    if let Some(home) = &home {
        hidden.extend(sandbox::default_hidden(home).into_iter().map(abs));
    }
    hidden.extend(sandbox::server_dirs().into_iter().map(abs));
    hidden.extend(
        config
            .sandbox
            .hidden
            .iter()
            .map(|p| abs(sandbox::expand(p, home.as_deref()))),
    );
    hidden.sort();
    hidden.dedup();
    let writable = config
        .sandbox
        .writable
        .iter()
        .map(|p| abs(sandbox::expand(p, home.as_deref())))
        .collect();
    let sockets = config
        .sandbox
        .sockets
        .iter()
        .map(|p| abs(sandbox::expand(p, home.as_deref())))
        .collect();
    if support.landlock_abi == 0 {
        if config.sandbox.require {
            tracing::error!(
                "sandbox {}: agents' commands will be refused ([sandbox] require = true)",
                support.describe()
            );
        } else {
            tracing::warn!(
                "sandbox {}: agents' commands run unconfined; set [sandbox] require = true to refuse them instead",
                support.describe()
            );
        }
    } else if !support.userns || support.gate.is_some() {
        tracing::warn!("sandbox: {}", support.describe());
    }
    if !config.sandbox.network && (1..4).contains(&support.landlock_abi) {
        tracing::warn!(
            "[sandbox] network = false is not enforced: this kernel's Landlock ABI {} cannot deny TCP (ABI 4 can)",
            support.landlock_abi
        );
    }
    sandbox::configure(Host {
        support: support.clone(),
        hidden,
        writable,
        sockets,
        require: config.sandbox.require,
        tmp_root: sandbox::tmp_root(state_dir),
    });
}

async fn serve(cli: &Cli, loaded: config::Loaded) -> anyhow::Result<()> {
    let started = Instant::now();
    let config = loaded.config;
    let state_dir = paths::state_dir();
    // Synced up to the first folder that was there: otherwise a power cut
    // soon after a first start forgets the state dir, and with it every
    // plan acknowledged since.
    flyto_actors::durable::create_dir_all_synced(&state_dir)
        .with_context(|| format!("cannot create state directory {}", state_dir.display()))?;
    // It holds transcripts and tool output; earlier versions left it open.
    paths::make_private(&state_dir)?;
    let _lock = lock::acquire(&state_dir)?;
    // Before anything runs or reruns: what a killed flytod left running is
    // gone, and what this one starts dies with it.
    flyto_actors::tools::leftovers::watch(&state_dir.join("runs"), Path::new("/proc/self/exe"))
        .with_context(|| {
            format!(
                "cannot record running commands in {}",
                state_dir.join("runs").display()
            )
        })?;
    // The shared store, when configured (a bad `[store]` stops us now).
    let database_url = config.database_url()?;
    let socket_path = flyto_protocol::paths::control_socket(cli.socket.as_deref());
    let support = flyto_actors::tools::sandbox::probe();
    configure_sandbox(&config, &state_dir, &loaded.path, &socket_path, &support);

    // One clock for every actor, so they agree on what time it is.
    let clock = clock_from_env()?;
    let store = Store::open(&state_dir.join("db"), config.daemon.cache_mb * 1024 * 1024)?;
    let plan_store: Arc<dyn flyto_actors::plans::PlanRecords> =
        Arc::new(SledPlanStore::open(store.clone())?);
    let reader = SledPlans::new(plan_store, state_dir.join("logs"));
    let plan_config = Arc::new(RwLock::new(config.plan_config(&socket_path)));
    let restarts = Arc::new(AtomicU64::new(0));

    // Bound before the actors start: recovery may restart steps, whose
    // scoped plan sockets live next to it. Served (and READY) only after.
    let bound = listener::bind(&socket_path)?;
    let policy: SharedPolicy = Arc::new(RwLock::new(Arc::new(config.policy()?)));
    // One registry for every session, scanned before we serve.
    let skills = Arc::new(flyto_actors::skills::SkillRegistry::new(
        config.skill_config(&loaded.path),
    ));
    if let Err(e) = flyto_actors::skills::watch::start(skills.clone()) {
        tracing::warn!(
            "skills: cannot start the folder watcher ({e}); use `flytoctl skill_reload`"
        );
    }
    flyto_actors::memory::entry::declare_types(&config.memory_types());
    let memory = Memory::new(state_dir.clone());
    let (plans, store_info) = match &database_url {
        Some(_) => (
            plan_reads::PlanReads::Joining,
            plan_reads::StoreInfo {
                describe: "postgres: joining the shared store".into(),
                shared: None,
            },
        ),
        None => (
            plan_reads::PlanReads::Open(PlanReader::new(Arc::new(reader.clone()))),
            plan_reads::StoreInfo {
                describe: format!("sled at {}", state_dir.join("db").display()),
                shared: None,
            },
        ),
    };
    let hooks = Arc::new(flyto_actors::hooks::Hooks::new(config.hooks()?));
    let mcp = {
        let (specs, host) = config.mcp(&socket_path)?;
        flyto_actors::mcp::McpHandle::new(specs, &config.mcp, host)
    };
    let ctx = Arc::new(server::Ctx {
        plans: RwLock::new(Arc::new(plans)),
        store: RwLock::new(Arc::new(store_info)),
        draining: AtomicBool::new(false),
        starting: AtomicBool::new(true),
        started,
        restarts: restarts.clone(),
        inflight: tokio::sync::Semaphore::new(config.daemon.max_inflight),
        connections: Arc::new(tokio::sync::Semaphore::new(config.daemon.max_connections)),
        // SAFETY: getuid has no preconditions.
        uid: unsafe { libc::getuid() },
        policy: policy.clone(),
        skills: skills.clone(),
        memory: memory.clone(),
        clock: clock.clone(),
        run_streams: Arc::default(),
        hooks: hooks.clone(),
        mcp: mcp.clone(),
    });
    let socket_dir = bound
        .path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("/"));
    let plan_sockets = Arc::new(DaemonPlanSockets::new(
        socket_dir,
        ctx.clone(),
        tokio::runtime::Handle::current(),
    ));
    plan_sockets.remove_stale();

    // The shared store: until it is joined, the socket answers (`stats`
    // says what it waits for; plan requests are Unavailable), and READY
    // waits.
    let mut listener = Some(bound.listener);
    let mut server_task = None;
    let joined = match &database_url {
        Some(url) => {
            server_task = listener
                .take()
                .map(|l| tokio::spawn(server::serve(l, ctx.clone(), None)));
            let waiting = |why: &str| {
                if let Ok(mut s) = ctx.store.write() {
                    *s = Arc::new(plan_reads::StoreInfo {
                        describe: format!("postgres: waiting to join the shared store: {why}"),
                        shared: None,
                    });
                }
            };
            Some(shared_store::join(url, shared_store::node_id(clock_ms()), &waiting).await?)
        }
        None => None,
    };
    // This node's previous run on this state directory is over (its lock
    // is ours): what it ran in-process (agent runs, channel bindings)
    // need not wait for its leases to run out.
    let previous_node = joined
        .as_ref()
        .and_then(|j| shared_store::previous_node(&state_dir, &j.node));
    if let (Some(j), Some(prev)) = (&joined, &previous_node) {
        match flyto_actors::session::shared::release_node(&j.shared, prev).await {
            Ok(0) => {}
            Ok(n) => {
                tracing::info!(node = %prev, n, "gave up the session claims of this node's previous run")
            }
            Err(e) => {
                tracing::warn!(node = %prev, error = %e, "cannot give up the session claims of this node's previous run; they run out by themselves")
            }
        }
    }
    let shared_reader = joined.as_ref().map(|j| {
        use flyto_actors::store::postgres::listen::Listener;
        use flyto_actors::store::postgres::plans::{PLANS_CHANNEL, WORK_CHANNEL};
        // One listener connection for the whole daemon; its poll is the
        // fallback for a notification that never came (the connection is
        // checked by TCP keepalives, and every reconnect wakes everyone):
        // rare, as each wake-up costs every waiter a read.
        let listener = Listener::start(
            &j.shared,
            &[
                WORK_CHANNEL,
                PLANS_CHANNEL,
                flyto_actors::jobs::shared::JOBS_CHANNEL,
                flyto_actors::channels::shared::CHANNELS_CHANNEL,
            ],
            Duration::from_secs(60),
        );
        flyto_actors::plans::PgPlans {
            shared: j.shared.clone(),
            listener: Arc::new(listener),
            log_dir: shared_log_dir(&state_dir),
        }
    });
    let store_info = match &joined {
        Some(j) => {
            tracing::info!(
                "plans, jobs, sessions, channels and memory are on the shared store at {}",
                j.shared.target
            );
            // Both stores on one node: say which one holds the plans.
            if let Ok(c) = reader.counts() {
                let held = c.pending + c.running + c.succeeded + c.failed + c.cancelled;
                if held > 0 {
                    tracing::warn!(
                        "this node's own store {} holds {held} plans ({} pending or running) that the shared store does not have: they stay there, unused and not run, while [store] backend = \"postgres\"; set backend = \"sled\" to run or read them",
                        state_dir.join("db").display(),
                        c.pending + c.running
                    );
                }
            }
            plan_reads::StoreInfo {
                describe: format!("postgres at {} (node {})", j.shared.target, j.node),
                shared: Some((j.shared.clone(), j.node.clone())),
            }
        }
        None => plan_reads::StoreInfo {
            describe: format!("sled at {}", state_dir.join("db").display()),
            shared: None,
        },
    };
    if let Some(r) = &shared_reader
        && let (Ok(mut plans), Ok(mut store)) = (ctx.plans.write(), ctx.store.write())
    {
        let reader = PlanReader::new(Arc::new(r.clone()));
        *plans = Arc::new(plan_reads::PlanReads::Open(reader));
        *store = Arc::new(store_info);
    }

    // Where `job_fired` and `plan_finished` hooks run for a plan.
    let plan_hooks = {
        let plan_config = plan_config.clone();
        flyto_actors::plans::PlanHooks {
            hooks: hooks.clone(),
            env: Arc::new(move |spec: &flyto_protocol::PlanSpec| plan_hook_env(&plan_config, spec)),
        }
    };
    let scheduler_spec = if let (Some(shared_reader), Some(j)) = (&shared_reader, &joined) {
        shared_scheduler_spec(
            shared_reader,
            &j.node,
            &plan_config,
            &clock,
            &state_dir,
            plan_sockets.clone(),
            plan_hooks.clone(),
        )
    } else {
        let reader = reader.clone();
        let sockets: Arc<dyn PlanSockets> = plan_sockets.clone();
        let plan_config = plan_config.clone();
        let clock = clock.clone();
        let plan_hooks = plan_hooks.clone();
        ChildSpec {
            name: "scheduler".into(),
            start: Arc::new(move |sup| {
                let args = SchedulerArgs {
                    reader: reader.clone(),
                    config: plan_config
                        .read()
                        .map(|c| c.clone())
                        .unwrap_or_else(|_| PlanConfig::default()),
                    clock: clock.clone(),
                    sockets: sockets.clone(),
                    hooks: Some(plan_hooks.clone()),
                };
                Box::pin(async move {
                    let (r, _) =
                        Actor::spawn_linked(Some(SCHEDULER_NAME.into()), SchedulerActor, args, sup)
                            .await?;
                    Ok(r.get_cell())
                })
            }),
        }
    };
    flyto_actors::tools::env::hide_key_vars(&config.models());
    let mut tools = flyto_actors::tools::builtin::all(policy.clone());
    tools.push(Arc::new(flyto_actors::skills::LoadSkillTool {
        registry: skills.clone(),
    }));
    tools.extend(flyto_actors::memory::tools::all(
        memory.clone(),
        clock.clone(),
    ));
    tools.extend(flyto_actors::jobs::tools::all(clock.clone()));
    tools.extend(flyto_actors::channels::tools::all());
    let session_deps = Arc::new(SessionDeps {
        store: match &joined {
            Some(j) => {
                let local = flyto_actors::session::store::SessionStore::list(
                    &SledSessionStore::open(store.clone())?,
                )
                .map(|s| s.len())
                .unwrap_or(0);
                if local > 0 {
                    tracing::warn!(
                        "this node's own store {} holds {local} sessions that the shared store does not have: they stay there, unused, while [store] backend = \"postgres\"",
                        state_dir.join("db").display()
                    );
                }
                Arc::new(flyto_actors::session::shared::SharedSessionStore::new(
                    j.shared.clone(),
                    j.node.clone(),
                ))
            }
            None => Arc::new(SledSessionStore::open(store.clone())?),
        },
        llm: LlmClient::new().context("cannot set up the HTTP client for model providers")?,
        models: RwLock::new(Arc::new(config.models())),
        tools: Registry::new(tools),
        config: RwLock::new(config.session_config(&socket_path)),
        clock: clock.clone(),
        sockets: plan_sockets.clone(),
        skills: skills.clone(),
        memory: memory.clone(),
        extractions: Default::default(),
        hooks: hooks.clone(),
        mcp: Some(mcp.clone()),
        on_activity: Some(Arc::new(flyto_actors::dream::actor::activity)),
    });
    let mcp_spec = {
        let mcp = mcp.clone();
        ChildSpec {
            name: "mcp".into(),
            start: Arc::new(move |sup| {
                let args = flyto_actors::mcp::McpArgs {
                    handle: mcp.clone(),
                };
                Box::pin(async move {
                    let (r, _) = Actor::spawn_linked(
                        Some(flyto_actors::mcp::MCP_NAME.into()),
                        flyto_actors::mcp::McpManager,
                        args,
                        sup,
                    )
                    .await?;
                    Ok(r.get_cell())
                })
            }),
        }
    };
    let breaker_spec = {
        let store = store.clone();
        let clock = clock.clone();
        ChildSpec {
            name: "breaker".into(),
            start: Arc::new(move |sup| {
                let args = BreakerArgs {
                    store: store.clone(),
                    clock: clock.clone(),
                };
                Box::pin(async move {
                    let (r, _) =
                        Actor::spawn_linked(Some(BREAKER_NAME.into()), BreakerActor, args, sup)
                            .await?;
                    Ok(r.get_cell())
                })
            }),
        }
    };
    let memory_shared = joined.as_ref().map(|j| {
        Arc::new(flyto_actors::memory::shared::SharedMemory::new(
            j.shared.clone(),
        ))
    });
    let memory_spec = {
        let (state_dir, clock) = (state_dir.clone(), clock.clone());
        let shared = memory_shared.clone();
        ChildSpec {
            name: "memory".into(),
            start: Arc::new(move |sup| {
                let args = MemoryArgs {
                    state_dir: state_dir.clone(),
                    clock: clock.clone(),
                    idle: MEMORY_IDLE_STOP,
                    shared: shared.clone(),
                };
                Box::pin(async move {
                    let (r, _) = Actor::spawn_linked(
                        Some(MEMORY_MANAGER_NAME.into()),
                        MemoryManager,
                        args,
                        sup,
                    )
                    .await?;
                    Ok(r.get_cell())
                })
            }),
        }
    };
    let dream_spec = {
        let deps = session_deps.clone();
        let config = config.dream_config()?;
        let run_ctx = Arc::new(flyto_actors::dream::run::RunCtx {
            state_dir: state_dir.clone(),
            memory: memory.clone(),
            sessions: deps.store.clone(),
            llm: deps.llm.clone(),
            models: Arc::new({
                let deps = deps.clone();
                move || deps.models()
            }),
            clock: clock.clone(),
            shared: match (&memory_shared, &joined) {
                (Some(m), Some(j)) => Some((m.clone(), j.node.clone())),
                _ => None,
            },
        });
        let dream_config = Arc::new(RwLock::new(config));
        (
            ChildSpec {
                name: "dream".into(),
                start: Arc::new({
                    let dream_config = dream_config.clone();
                    move |sup| {
                        let args = flyto_actors::dream::actor::DreamArgs {
                            ctx: run_ctx.clone(),
                            config: dream_config.read().map(|c| c.clone()).unwrap_or_default(),
                        };
                        Box::pin(async move {
                            let (r, _) = Actor::spawn_linked(
                                Some(flyto_actors::dream::DREAM_NAME.into()),
                                flyto_actors::dream::actor::DreamActor,
                                args,
                                sup,
                            )
                            .await?;
                            Ok(r.get_cell())
                        })
                    }
                }),
            },
            dream_config,
        )
    };
    let (dream_spec, dream_config) = dream_spec;
    let jobs_spec = {
        use flyto_actors::jobs::model::{JobStore, SledJobStore};
        use flyto_actors::plans::reader::PlanLookup;
        let local_jobs = SledJobStore::open(store.clone())?;
        let (job_store, plan_lookup): (Arc<dyn JobStore>, Arc<dyn PlanLookup>) = match (
            &joined,
            &shared_reader,
        ) {
            (Some(j), Some(r)) => {
                let held = local_jobs.all().map(|j| j.len()).unwrap_or(0);
                if held > 0 {
                    tracing::warn!(
                        "this node's own store {} holds {held} jobs that the shared store does not have: they do not fire while [store] backend = \"postgres\"; set backend = \"sled\" to run them",
                        state_dir.join("db").display()
                    );
                }
                (
                    Arc::new(flyto_actors::jobs::shared::SharedJobStore {
                        shared: j.shared.clone(),
                        node: j.node.clone(),
                        listener: r.listener.clone(),
                    }),
                    Arc::new(r.clone()),
                )
            }
            _ => (Arc::new(local_jobs), Arc::new(reader.clone())),
        };
        let retry_backoff = config.retry_backoff()?;
        let clock = clock.clone();
        let job_hooks = plan_hooks.clone();
        ChildSpec {
            name: "jobs".into(),
            start: Arc::new(move |sup| {
                let args = flyto_actors::jobs::actor::JobsArgs {
                    store: job_store.clone(),
                    reader: plan_lookup.clone(),
                    clock: clock.clone(),
                    retry_backoff: retry_backoff.clone(),
                    hooks: Some(job_hooks.clone()),
                };
                Box::pin(async move {
                    let (r, _) = Actor::spawn_linked(
                        Some(flyto_actors::jobs::actor::JOBS_NAME.into()),
                        flyto_actors::jobs::actor::JobsActor,
                        args,
                        sup,
                    )
                    .await?;
                    Ok(r.get_cell())
                })
            }),
        }
    };
    let channels_now = api::channels::current(&config.channels, config.channels_config()?);
    let channels_spec = {
        use flyto_actors::channels::store::ChannelStore;
        let (channel_store, cluster) = match (&joined, &shared_reader) {
            (Some(j), Some(r)) => {
                let backend = Arc::new(flyto_actors::channels::shared::SharedChannels::new(
                    j.shared.clone(),
                ));
                let on_shared: std::collections::HashSet<String> = match backend.bindings().await {
                    Ok(b) => b.into_iter().map(|b| b.name).collect(),
                    Err(_) => Default::default(),
                };
                let local = ChannelStore::open(store.clone())?
                    .bindings()?
                    .into_iter()
                    .filter(|b| !on_shared.contains(&b.name))
                    .count();
                if local > 0 {
                    tracing::warn!(
                        "this node's own store {} holds {local} channel bindings that the shared store does not have: they are not polled while [store] backend = \"postgres\"; copy them with `flytod migrate --from-sled` (flytod stopped) or bind them again (`flytoctl channel_bind`)",
                        state_dir.join("db").display()
                    );
                }
                let cluster = flyto_actors::channels::lease::Cluster {
                    backend: backend.clone(),
                    node: j.node.clone(),
                    previous: previous_node.clone(),
                    listener: Some(r.listener.clone()),
                    times: Default::default(),
                };
                (ChannelStore::on(backend), Some(cluster))
            }
            _ => (ChannelStore::open(store.clone())?, None),
        };
        let channels_now = channels_now.clone();
        let clock = clock.clone();
        ChildSpec {
            name: "channels".into(),
            start: Arc::new(move |sup| {
                // The [channels] in force: a restart after a reload keeps it.
                let (config, factory) = channels_now
                    .read()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone();
                let args = flyto_actors::channels::manager::ChannelsArgs {
                    store: channel_store.clone(),
                    clock: clock.clone(),
                    config,
                    factory,
                    cluster: cluster.clone(),
                };
                Box::pin(async move {
                    let (r, _) = Actor::spawn_linked(
                        Some(flyto_actors::channels::manager::CHANNELS_NAME.into()),
                        flyto_actors::channels::manager::ChannelManager,
                        args,
                        sup,
                    )
                    .await?;
                    Ok(r.get_cell())
                })
            }),
        }
    };
    let sessions_spec = {
        let deps = session_deps.clone();
        ChildSpec {
            name: "sessions".into(),
            start: Arc::new(move |sup| {
                let deps = deps.clone();
                Box::pin(async move {
                    let (r, _) = Actor::spawn_linked(
                        Some(SESSION_MANAGER_NAME.into()),
                        SessionManager,
                        deps,
                        sup,
                    )
                    .await?;
                    Ok(r.get_cell())
                })
            }),
        }
    };
    // Recovery runs inside the children's start, before we serve and report READY.
    // Sessions before the scheduler: recovered agent steps start at once and
    // need the session manager (which first repairs what a crash left).
    let (supervisor, supervisor_done) = Actor::spawn(
        Some("flyto.supervisor".into()),
        Supervisor,
        SupervisorArgs {
            children: vec![
                breaker_spec,
                mcp_spec,
                memory_spec,
                sessions_spec,
                dream_spec,
                scheduler_spec,
                jobs_spec,
                channels_spec,
            ],
            policy: config.restart_policy(),
            restarts: restarts.clone(),
        },
    )
    .await
    .context("cannot start the actors (see the log above)")?;

    ctx.starting.store(false, Ordering::Release);
    let server_task = match (server_task, listener) {
        (Some(task), _) => task,
        (None, Some(l)) => tokio::spawn(server::serve(l, ctx.clone(), None)),
        (None, None) => anyhow::bail!("the control socket was lost while starting"),
    };
    tracing::info!(
        socket = %bound.path.display(),
        state = %state_dir.display(),
        config = %loaded.path.display(),
        "flytod {} ready",
        server::DAEMON_VERSION
    );
    // Handlers first: a SIGTERM right after READY must drain, not kill.
    // SIGCHLD: an orphan flytod adopted (as subreaper) has exited.
    let mut signals = signal_hook_tokio::Signals::new([SIGTERM, SIGINT, SIGHUP, SIGCHLD])
        .context("cannot install the signal handlers")?;
    notify::ready(&format!("serving {}", bound.path.display()));
    notify::spawn_watchdog(supervisor.clone());

    let mut supervisor_done = supervisor_done;
    let mut grace = config.daemon.shutdown_grace;
    let failed = loop {
        let signal = tokio::select! {
            signal = signals.next() => signal,
            _ = &mut supervisor_done => break true,
        };
        match signal {
            Some(SIGCHLD) => {
                tokio::task::spawn_blocking(flyto_actors::tools::process::reap_orphans);
            }
            Some(SIGHUP) => {
                match config::load(cli.config.as_deref()) {
                    Ok(new) => {
                        let pc = new.config.plan_config(&socket_path);
                        if let Ok(mut c) = plan_config.write() {
                            *c = pc.clone();
                        }
                        grace = new.config.daemon.shutdown_grace;
                        flyto_actors::tools::env::hide_key_vars(&new.config.models());
                        if let Ok(mut m) = session_deps.models.write() {
                            *m = Arc::new(new.config.models());
                        }
                        match new.config.policy() {
                            Ok(p) => {
                                if let Ok(mut current) = policy.write() {
                                    *current = Arc::new(p);
                                }
                            }
                            // parse() checked it; keep the old one if not.
                            Err(e) => tracing::error!("keeping the old [permissions]: {e:#}"),
                        }
                        if let Ok(mut c) = session_deps.config.write() {
                            *c = new.config.session_config(&socket_path);
                        }
                        if let Ok(h) = new.config.hooks() {
                            session_deps.hooks.replace(h);
                        }
                        match new.config.mcp(&socket_path) {
                            Ok((specs, host)) => mcp.configure(specs, &new.config.mcp, host),
                            Err(e) => tracing::error!("keeping the old [mcp]: {e:#}"),
                        }
                        match new.config.channels_config() {
                            Ok(c) => api::channels::reload(&channels_now, &new.config.channels, c),
                            Err(e) => tracing::error!("keeping the old [channels]: {e:#}"),
                        }
                        flyto_actors::memory::entry::declare_types(&new.config.memory_types());
                        // SIGHUP also rescans the skills.
                        skills.reconfigure(new.config.skill_config(&new.path));
                        configure_sandbox(
                            &new.config,
                            &state_dir,
                            &new.path,
                            &socket_path,
                            &flyto_actors::tools::sandbox::probe(),
                        );
                        if let Ok(dc) = new.config.dream_config() {
                            if let Ok(mut c) = dream_config.write() {
                                *c = dc.clone();
                            }
                            if let Some(cell) =
                                ractor::registry::where_is(flyto_actors::dream::DREAM_NAME.into())
                            {
                                let _ =
                                    ActorRef::<flyto_actors::dream::actor::DreamMsg>::from(cell)
                                        .cast(flyto_actors::dream::actor::DreamMsg::Reconfigure(
                                            dc,
                                        ));
                            }
                        }
                        if let Some(cell) = ractor::registry::where_is(SCHEDULER_NAME.into()) {
                            let _ = ActorRef::<SchedulerMsg>::from(cell)
                                .cast(SchedulerMsg::Reconfigure(pc));
                        }
                        tracing::info!("config reloaded from {}", new.path.display());
                        notify::status(&format!(
                            "serving {} (config reloaded)",
                            bound.path.display()
                        ));
                    }
                    Err(e) => {
                        tracing::error!("config reload failed, keeping the running config: {e:#}");
                        notify::status("config reload failed; running with the previous config");
                    }
                }
            }
            // SIGTERM, SIGINT (or the handlers gone): drain.
            _ => break false,
        }
    };

    if failed {
        tracing::error!(
            "the actor supervisor gave up; exiting so the service manager restarts flytod"
        );
        store.sync_blocking()?;
        plan_sockets.close_all();
        if bound.owned {
            let _ = std::fs::remove_file(&bound.path);
        }
        anyhow::bail!("actors failed too often; see the log above");
    }

    tracing::info!(grace = ?grace, "draining");
    ctx.draining.store(true, Ordering::SeqCst);
    notify::stopping();
    // Plans and sessions drain together, each with the same grace.
    let wait = grace + Duration::from_secs(30);
    let plans = async {
        if let Some(cell) = ractor::registry::where_is(SCHEDULER_NAME.into()) {
            let scheduler = ActorRef::<SchedulerMsg>::from(cell);
            let drained = scheduler
                .call(|reply| SchedulerMsg::Drain { grace, reply }, Some(wait))
                .await;
            if !matches!(drained, Ok(ractor::rpc::CallResult::Success(()))) {
                tracing::warn!("the scheduler did not finish draining in time");
            }
        }
    };
    let sessions = async {
        if let Some(cell) = ractor::registry::where_is(SESSION_MANAGER_NAME.into()) {
            let manager = ActorRef::<ManagerMsg>::from(cell);
            let drained = manager
                .call(|reply| ManagerMsg::Drain { grace, reply }, Some(wait))
                .await;
            if !matches!(drained, Ok(ractor::rpc::CallResult::Success(()))) {
                tracing::warn!("the sessions did not finish draining in time");
            }
        }
    };
    tokio::join!(plans, sessions);
    // The runs have ended; let their clients read how.
    ctx.run_streams.wait_idle(Duration::from_secs(2)).await;
    supervisor.stop(None);
    let _ = supervisor_done.await;
    server_task.abort();
    plan_sockets.close_all();
    store.sync_blocking()?;
    if bound.owned {
        let _ = std::fs::remove_file(&bound.path);
    }
    tracing::info!("stopped");
    Ok(())
}

/// Where a `job_fired` or `plan_finished` hook runs: the workdir of the
/// plan (its first step's, or the plans' default), the daemon's filtered
/// environment, and the sandbox `[sandbox]` gives a plan's steps.
fn plan_hook_env(
    plan_config: &RwLock<PlanConfig>,
    spec: &flyto_protocol::PlanSpec,
) -> flyto_actors::hooks::HookEnv {
    let config = plan_config.read().map(|c| c.clone()).unwrap_or_default();
    let workdir = spec
        .steps
        .first()
        .and_then(|s| s.workdir.clone())
        .map(PathBuf::from)
        .filter(|p| p.is_absolute() && p.is_dir())
        .unwrap_or_else(|| PathBuf::from(&config.default_workdir));
    let sandbox = flyto_actors::tools::sandbox::SandboxSpec {
        profile: config.sandbox,
        write_roots: vec![workdir.clone()],
        tmpdir: None,
        network: config.sandbox_network,
    };
    flyto_actors::hooks::HookEnv {
        env: flyto_actors::tools::env::child_env(std::env::vars(), &[]),
        sandbox: (!sandbox.is_off()).then_some(sandbox),
        workdir,
        cancel: Default::default(),
    }
}
