//! Plans to submit: a `PlanSpec` read from a TOML or JSON file (or stdin),
//! or the one-step plan of `--run` / `--prompt`.
//!
//! Workdirs follow one rule, because the daemon runs elsewhere: a step
//! without one runs in the submitter's current directory; a relative one
//! in a file is relative to the file's directory (the current directory for
//! stdin); `~` and `~/…` are the submitter's home.

use crate::exit::usage;
use anyhow::{Context, Result};
use flyto_protocol::{PlanSpec, StepSpec};
use std::io::{IsTerminal, Read};
use std::path::{Path, PathBuf};

/// Id of the single step of a `--run` / `--prompt` plan.
pub const ONE_STEP_ID: &str = "main";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json,
    Toml,
}

impl Format {
    /// By extension (`.json`, `.toml`); otherwise JSON if the text starts
    /// with `{`, else TOML.
    pub fn detect(path: Option<&Path>, text: &str) -> Format {
        let ext = path
            .and_then(Path::extension)
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        match ext.as_deref() {
            Some("json") => Format::Json,
            Some("toml") => Format::Toml,
            _ if text.trim_start().starts_with('{') => Format::Json,
            _ => Format::Toml,
        }
    }
}

/// Parses and checks a plan; `source` names it in errors.
pub fn parse(source: &str, text: &str, format: Format) -> Result<PlanSpec> {
    let plan: PlanSpec = match format {
        Format::Json => serde_json::from_str(text)
            .map_err(|e| usage(format!("{source} is not a valid JSON plan: {e}")))?,
        Format::Toml => toml::from_str(text).map_err(|e| {
            usage(format!(
                "{source} is not a valid TOML plan: {}",
                e.to_string().trim_end()
            ))
        })?,
    };
    check(source, &plan)?;
    Ok(plan)
}

/// The daemon's own structural checks, here so that every invalid plan
/// file is a usage error (exit 2) before anything is sent.
fn check(source: &str, plan: &PlanSpec) -> Result<()> {
    plan.check()
        .map_err(|e| usage(format!("{source} is not a valid plan: {e}")))
}

/// Reads a plan from `path`, or from stdin when `path` is `None` or `-`.
pub fn load(path: Option<&Path>) -> Result<PlanSpec> {
    let file = path.filter(|p| *p != Path::new("-"));
    let (source, text, base) = match file {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .map_err(|e| usage(format!("cannot read plan file {}: {e}", p.display())))?;
            let abs = std::path::absolute(p)
                .with_context(|| format!("cannot resolve the path {}", p.display()))?;
            let base = abs.parent().map(Path::to_path_buf).unwrap_or(abs);
            (p.display().to_string(), text, base)
        }
        None => {
            let mut stdin = std::io::stdin();
            if stdin.is_terminal() {
                crate::output::note(
                    "reading the plan (TOML or JSON) from stdin; end it with Ctrl-D",
                );
            }
            let mut text = String::new();
            stdin
                .read_to_string(&mut text)
                .map_err(|e| usage(format!("cannot read the plan from stdin: {e}")))?;
            let cwd = std::env::current_dir().context("cannot determine the current directory")?;
            ("<stdin>".to_string(), text, cwd)
        }
    };
    let mut plan = parse(&source, &text, Format::detect(file, &text))?;
    let cwd = std::env::current_dir().context("cannot determine the current directory")?;
    let home = std::env::var_os("HOME").map(PathBuf::from);
    resolve_workdirs(&mut plan, &base, &cwd, home.as_deref())?;
    for step in &plan.steps {
        if let Some(dir) = &step.workdir
            && !Path::new(dir).is_dir()
        {
            return Err(usage(format!(
                "{source} is not a valid plan: step `{}`: workdir {dir} does not exist or is not a directory: create it or fix the path",
                step.id
            )));
        }
    }
    Ok(plan)
}

/// Gives every step an absolute `workdir`: `cwd` when it has none, `~`
/// expanded with `home`, a relative one against `base`.
pub fn resolve_workdirs(
    plan: &mut PlanSpec,
    base: &Path,
    cwd: &Path,
    home: Option<&Path>,
) -> Result<()> {
    for step in &mut plan.steps {
        let dir = match step.workdir.as_deref() {
            None => cwd.to_path_buf(),
            Some(dir) => {
                let dir = expand_home(dir, home)?;
                if dir.is_relative() {
                    absolute(&base.join(dir))?
                } else {
                    dir
                }
            }
        };
        step.workdir = Some(path_string(&dir)?);
    }
    Ok(())
}

/// `~` and `~/rest` as the submitter's home; `~user` is not supported.
fn expand_home(dir: &str, home: Option<&Path>) -> Result<PathBuf> {
    let rest = match dir.strip_prefix('~') {
        Some("") => "",
        Some(rest) if rest.starts_with('/') => rest.trim_start_matches('/'),
        Some(_) => {
            return Err(usage(format!(
                "workdir `{dir}`: only `~` and `~/…` are expanded; give the path in full"
            )));
        }
        None => return Ok(PathBuf::from(dir)),
    };
    let home = home.ok_or_else(|| {
        usage(format!(
            "workdir `{dir}` starts with `~` but HOME is not set: give the path in full"
        ))
    })?;
    Ok(if rest.is_empty() {
        home.to_path_buf()
    } else {
        home.join(rest)
    })
}

/// Variables of the submitter's environment that a plan takes along, so
/// that its steps find the same programs wherever flytod runs (under
/// systemd its PATH is much shorter than a login shell's) and the active
/// Python environment. Nothing else is taken: the rest of the caller's
/// environment may hold secrets, and the daemon refuses secret-looking
/// names in a plan's env anyway.
pub const CAPTURED_ENV: [&str; 4] = ["PATH", "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV"];

/// Adds `--env` pairs (over the file's plan-level `env`) and, under both,
/// the [`CAPTURED_ENV`] variables from `caller`.
pub fn add_env(
    plan: &mut PlanSpec,
    set: Vec<(String, String)>,
    caller: impl Fn(&str) -> Option<String>,
) {
    for name in CAPTURED_ENV {
        if !plan.env.contains_key(name)
            && let Some(value) = caller(name)
        {
            plan.env.insert(name.to_string(), value);
        }
    }
    plan.env.extend(set);
}

/// `--env KEY=VAL`.
pub fn parse_env(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("`{s}` is not KEY=VALUE")),
    }
}

/// The options of a one-step plan.
#[derive(Debug, Default)]
pub struct OneStep {
    pub run: Option<String>,
    pub prompt: Option<String>,
    pub name: Option<String>,
    pub session: Option<String>,
    pub timeout_secs: Option<u64>,
    pub workdir: Option<PathBuf>,
    pub max_attempts: Option<u32>,
}

/// A plan with the single step `main`, run (command or prompt) in the
/// current directory unless `workdir` says otherwise.
pub fn one_step(opts: OneStep) -> Result<PlanSpec> {
    let workdir = match &opts.workdir {
        Some(dir) => {
            if !dir.is_dir() {
                return Err(usage(format!(
                    "--workdir {} is not a directory",
                    dir.display()
                )));
            }
            Some(path_string(&absolute(dir)?)?)
        }
        None => {
            let cwd = std::env::current_dir().context("cannot determine the current directory")?;
            Some(path_string(&cwd)?)
        }
    };
    let step = StepSpec {
        id: ONE_STEP_ID.to_string(),
        run: opts.run,
        prompt: opts.prompt,
        session: opts.session,
        deps: Vec::new(),
        timeout_secs: opts.timeout_secs,
        max_attempts: opts.max_attempts,
        workdir,
        env: Default::default(),
        sandbox: None,
        idempotent: false,
    };
    let plan = PlanSpec {
        name: opts.name,
        steps: vec![step],
        env: Default::default(),
        sandbox: None,
    };
    check("the command line", &plan)?;
    Ok(plan)
}

/// `--timeout`: whole seconds (`90`) or a humantime duration (`5m`, `1h30m`).
pub fn parse_timeout(s: &str) -> Result<u64, String> {
    let secs = flyto_protocol::duration::parse_secs("--timeout", s)?;
    if secs == 0 {
        return Err("the timeout must be at least 1 second".to_string());
    }
    Ok(secs)
}

/// A flag of seconds (`--jitter`): a number, or a duration like `5m`.
pub fn parse_secs(s: &str) -> Result<u64, String> {
    flyto_protocol::duration::parse_secs("the value", s)
}

fn absolute(path: &Path) -> Result<PathBuf> {
    std::path::absolute(path).with_context(|| format!("cannot resolve the path {}", path.display()))
}

fn path_string(path: &Path) -> Result<String> {
    path.to_str()
        .map(str::to_string)
        .ok_or_else(|| usage(format!("the path {} is not valid UTF-8", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOML_PLAN: &str = r#"
name = "nightly"

[[steps]]
id = "fetch"
run = "git pull"
timeout_secs = 60

[[steps]]
id = "review"
prompt = "Review the diff"
deps = ["fetch"]
max_attempts = 2
session = "reviewer"
workdir = "sub"
"#;

    #[test]
    fn parses_toml() {
        let plan = parse("plan.toml", TOML_PLAN, Format::Toml).unwrap();
        assert_eq!(plan.name.as_deref(), Some("nightly"));
        assert_eq!(plan.steps.len(), 2);
        assert_eq!(plan.steps[0].run.as_deref(), Some("git pull"));
        assert_eq!(plan.steps[0].timeout_secs, Some(60));
        assert_eq!(plan.steps[1].deps, vec!["fetch".to_string()]);
        assert_eq!(plan.steps[1].session.as_deref(), Some("reviewer"));
        assert_eq!(plan.steps[1].max_attempts, Some(2));
    }

    #[test]
    fn parses_json() {
        let text = r#"{"name": "j", "steps": [{"id": "a", "run": "true"}, {"id": "b", "prompt": "hi", "deps": ["a"]}]}"#;
        let plan = parse("plan.json", text, Format::Json).unwrap();
        assert_eq!(plan.steps[1].prompt.as_deref(), Some("hi"));
        assert_eq!(plan.steps[1].deps, vec!["a".to_string()]);
    }

    #[test]
    fn detects_the_format() {
        let p = |s: &str| Some(PathBuf::from(s));
        assert_eq!(
            Format::detect(p("x.json").as_deref(), "a = 1"),
            Format::Json
        );
        assert_eq!(Format::detect(p("x.TOML").as_deref(), "{"), Format::Toml);
        assert_eq!(
            Format::detect(p("plan").as_deref(), "  {\"steps\":[]}"),
            Format::Json
        );
        assert_eq!(Format::detect(None, "[[steps]]"), Format::Toml);
    }

    #[test]
    fn toml_errors_name_the_file_and_the_position() {
        let text = "[[steps]]\nid = \"a\"\nrun = \"true\"\ncolour = \"red\"\n";
        let err = parse("plans/bad.toml", text, Format::Toml).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.starts_with("plans/bad.toml is not a valid TOML plan"),
            "{msg}"
        );
        assert!(msg.contains("line 4"), "{msg}");
        assert!(msg.contains("colour"), "{msg}");
        assert_eq!(crate::exit::code_for(&err), crate::exit::USAGE);
    }

    #[test]
    fn json_errors_name_the_file_and_the_position() {
        let err = parse("p.json", "{\"steps\": [{\"id\": 3}]}", Format::Json).unwrap_err();
        let msg = err.to_string();
        assert!(msg.starts_with("p.json is not a valid JSON plan"), "{msg}");
        assert!(msg.contains("line 1 column"), "{msg}");
    }

    #[test]
    fn every_invalid_plan_is_a_usage_error() {
        let step = |extra: &str| format!("[[steps]]\nid = \"a\"\nrun = \"true\"\n{extra}");
        let cases = [
            ("name = \"x\"\n".to_string(), "has no steps"),
            (step("prompt = \"hi\"\n"), "has both `run` and `prompt`"),
            (step("deps = [\"nope\"]\n"), "depends on `nope`"),
            (
                format!(
                    "{}[[steps]]\nid = \"b\"\nrun = \"true\"\ndeps = [\"a\"]\n",
                    step("deps = [\"b\"]\n")
                ),
                "dependency cycle",
            ),
            (step("[steps.env]\n\"A-B\" = \"1\"\n"), "env name `A-B`"),
        ];
        for (text, want) in cases {
            let err = parse("x.toml", &text, Format::Toml).unwrap_err();
            assert!(err.to_string().contains(want), "{err} should say {want}");
            assert_eq!(crate::exit::code_for(&err), crate::exit::USAGE);
        }
    }

    #[test]
    fn workdirs_resolve_by_one_rule() {
        let mut plan = parse("plan.toml", TOML_PLAN, Format::Toml).unwrap();
        let (base, cwd, home) = (
            Path::new("/srv/plans"),
            Path::new("/here"),
            Some(Path::new("/home/me")),
        );
        resolve_workdirs(&mut plan, base, cwd, home).unwrap();
        assert_eq!(plan.steps[0].workdir.as_deref(), Some("/here"));
        assert_eq!(plan.steps[1].workdir.as_deref(), Some("/srv/plans/sub"));
        for (dir, want) in [
            ("/abs", "/abs"),
            ("~", "/home/me"),
            ("~/src/x", "/home/me/src/x"),
        ] {
            plan.steps[0].workdir = Some(dir.into());
            resolve_workdirs(&mut plan, base, cwd, home).unwrap();
            assert_eq!(plan.steps[0].workdir.as_deref(), Some(want));
        }
        plan.steps[0].workdir = Some("~bob/x".into());
        assert!(resolve_workdirs(&mut plan, base, cwd, home).is_err());
    }

    #[test]
    fn env_layers_captured_then_file_then_flags() {
        let text = "[env]\nPATH = \"/file/bin\"\nA = \"file\"\n[[steps]]\nid = \"a\"\nrun = \"true\"\nenv = { A = \"step\" }\n";
        let mut plan = parse("p.toml", text, Format::Toml).unwrap();
        let caller =
            |k: &str| matches!(k, "PATH" | "VIRTUAL_ENV" | "HOME").then(|| format!("caller-{k}"));
        add_env(&mut plan, vec![("B".into(), "flag".into())], caller);
        let env: Vec<(&str, &str)> = plan
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            env,
            [
                ("A", "file"),
                ("B", "flag"),
                ("PATH", "/file/bin"),
                ("VIRTUAL_ENV", "caller-VIRTUAL_ENV")
            ]
        );
        assert_eq!(plan.steps[0].env["A"], "step");
        assert_eq!(parse_env("K=a=b"), Ok(("K".into(), "a=b".into())));
        assert!(parse_env("=x").is_err());
        assert!(parse_env("novalue").is_err());
    }

    #[test]
    fn one_step_plans_default_to_the_current_directory() {
        let plan = one_step(OneStep {
            run: Some("echo hello".into()),
            timeout_secs: Some(5),
            ..Default::default()
        })
        .unwrap();
        let step = &plan.steps[0];
        assert_eq!(step.id, ONE_STEP_ID);
        assert_eq!(step.run.as_deref(), Some("echo hello"));
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(step.workdir.as_deref(), cwd.to_str());
        let plan = one_step(OneStep {
            prompt: Some("hi".into()),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(plan.steps[0].workdir.as_deref(), cwd.to_str());
    }

    #[test]
    fn timeouts() {
        assert_eq!(parse_timeout("90"), Ok(90));
        assert_eq!(parse_timeout("5m"), Ok(300));
        assert_eq!(parse_timeout("1.5s"), Ok(2));
        assert!(parse_timeout("0").is_err());
        assert!(parse_timeout("soon").is_err());
    }
}
