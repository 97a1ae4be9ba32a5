//! Plans to submit: a `PlanSpec` read from a TOML or JSON file (or stdin),
//! or the one-step plan of `--run` / `--prompt`.
//!
//! Relative step `workdir`s in a file are resolved against the file's
//! directory (the current directory for stdin), because the daemon runs
//! elsewhere.

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

fn check(source: &str, plan: &PlanSpec) -> Result<()> {
    if plan.steps.is_empty() {
        return Err(usage(format!(
            "{source} has no steps: add at least one step with an `id` and a `run` or `prompt`"
        )));
    }
    for step in &plan.steps {
        if step.run.is_some() == step.prompt.is_some() {
            return Err(usage(format!(
                "{source}: step `{}` needs exactly one of `run` (a shell command) or `prompt` (an agent prompt)",
                step.id
            )));
        }
    }
    Ok(())
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
    resolve_workdirs(&mut plan, &base)?;
    Ok(plan)
}

/// Makes every relative step `workdir` absolute against `base`.
pub fn resolve_workdirs(plan: &mut PlanSpec, base: &Path) -> Result<()> {
    for step in &mut plan.steps {
        if let Some(dir) = &step.workdir {
            let dir = Path::new(dir);
            if dir.is_relative() {
                step.workdir = Some(path_string(&absolute(&base.join(dir))?)?);
            }
        }
    }
    Ok(())
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

/// A plan with the single step `main`. A `--run` step runs in the current
/// directory unless `workdir` says otherwise.
pub fn one_step(opts: OneStep) -> Result<PlanSpec> {
    let workdir = match (&opts.workdir, &opts.run) {
        (Some(dir), _) => {
            if !dir.is_dir() {
                return Err(usage(format!(
                    "--workdir {} is not a directory",
                    dir.display()
                )));
            }
            Some(path_string(&absolute(dir)?)?)
        }
        (None, Some(_)) => {
            let cwd = std::env::current_dir().context("cannot determine the current directory")?;
            Some(path_string(&cwd)?)
        }
        (None, None) => None,
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
    };
    let plan = PlanSpec {
        name: opts.name,
        steps: vec![step],
    };
    check("the command line", &plan)?;
    Ok(plan)
}

/// `--timeout`: whole seconds (`90`) or a humantime duration (`5m`, `1h30m`).
pub fn parse_timeout(s: &str) -> Result<u64, String> {
    let secs = match s.trim().parse::<u64>() {
        Ok(secs) => secs,
        Err(_) => {
            let d = humantime::parse_duration(s.trim()).map_err(|e| {
                format!("`{s}` is not a number of seconds or a duration like 90s or 5m: {e}")
            })?;
            d.as_secs() + u64::from(d.subsec_nanos() > 0)
        }
    };
    if secs == 0 {
        return Err("the timeout must be at least 1 second".to_string());
    }
    Ok(secs)
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
    fn rejects_plans_without_steps_or_with_ambiguous_steps() {
        let err = parse("e.toml", "name = \"x\"\n", Format::Toml).unwrap_err();
        assert!(err.to_string().contains("e.toml has no steps"));
        let text = "[[steps]]\nid = \"a\"\nrun = \"true\"\nprompt = \"hi\"\n";
        let err = parse("b.toml", text, Format::Toml).unwrap_err();
        assert!(err.to_string().contains("step `a` needs exactly one of"));
    }

    #[test]
    fn relative_workdirs_resolve_against_the_base() {
        let mut plan = parse("plan.toml", TOML_PLAN, Format::Toml).unwrap();
        plan.steps[0].workdir = Some("/abs".into());
        resolve_workdirs(&mut plan, Path::new("/srv/plans")).unwrap();
        assert_eq!(plan.steps[0].workdir.as_deref(), Some("/abs"));
        assert_eq!(plan.steps[1].workdir.as_deref(), Some("/srv/plans/sub"));
    }

    #[test]
    fn one_step_run_defaults_to_the_current_directory() {
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
        assert_eq!(plan.steps[0].workdir, None);
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
