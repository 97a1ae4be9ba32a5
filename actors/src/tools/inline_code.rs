//! inline_code: what an interpreter's inline program (`python3 -c`, `perl
//! -e`, `ruby -e`, `node -e`, `php -r`) obviously does outside itself: the
//! shell command lines it hands to a shell (`os.system`, `system`,
//! backticks), the programs it runs from a list (`subprocess.run([...])`),
//! the trees and files it deletes (`shutil.rmtree`, `fs.rmSync`,
//! `File.delete`) and the paths it opens for writing. [`super::shell`] turns
//! each finding into simple commands and redirects for the policy.
//!
//! **Invariant**: a scan for the obvious, not an interpreter. It reads calls
//! whose arguments are literals; an argument it cannot read is reported as
//! computed (never guessed), and a name too common to be sure of (`run`,
//! `exec`) counts only with literal arguments.

/// The interpreters whose inline code is scanned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    Python,
    Perl,
    Ruby,
    Node,
    Php,
}

/// The language of interpreter `program` (a base name), if scanned.
pub fn language(program: &str) -> Option<Language> {
    let versioned = |prefix: &str| {
        program
            .strip_prefix(prefix)
            .is_some_and(|v| v.chars().all(|c| c.is_ascii_digit() || c == '.'))
    };
    if versioned("python") || versioned("pypy") {
        Some(Language::Python)
    } else if versioned("perl") {
        Some(Language::Perl)
    } else if versioned("ruby") {
        Some(Language::Ruby)
    } else if program == "node" || program == "nodejs" {
        Some(Language::Node)
    } else if versioned("php") {
        Some(Language::Php)
    } else {
        None
    }
}

/// An argument of a call, as far as it is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Arg {
    Lit(String),
    /// An expression for the home directory (`os.path.expanduser('~')`,
    /// `process.env.HOME`, `Dir.home`, ...).
    Home,
    /// Anything computed at run time, as written.
    Computed(String),
}

/// One thing the code does outside itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// A command line handed to a shell.
    Shell(String),
    /// A program run with these arguments, no shell in between.
    Argv(Vec<Arg>),
    /// Deletes `target`, recursively or not.
    Delete { recursive: bool, target: Arg },
    /// Opens `target` for writing.
    Write(Arg),
    /// Runs a command computed at run time: the call, as written.
    Dynamic(String),
}

/// Most findings reported for one program (bounds the work on huge code).
pub const MAX_ACTIONS: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Runs a shell line (one string) or a program (a list, or several
    /// strings).
    Run,
    /// Like `Run` when its arguments are literals; the name is too common
    /// (`exec`, `run`) to call a computed argument a command.
    RunIfLiteral,
    DeleteTree,
    /// `fs.rm(path, {recursive: true})`: a tree only with that option.
    DeleteMaybeTree,
    DeleteFile,
    /// Opens or writes a path: a write when the name or a mode says so.
    Open,
}

use Kind::*;

/// Calls by their full dotted name.
fn full_name(lang: Language, name: &str) -> Option<Kind> {
    Some(match (lang, name) {
        (
            Language::Python,
            "os.system"
            | "os.popen"
            | "subprocess.run"
            | "subprocess.call"
            | "subprocess.check_call"
            | "subprocess.check_output"
            | "subprocess.Popen"
            | "subprocess.getoutput"
            | "subprocess.getstatusoutput",
        ) => Run,
        (Language::Python, "shutil.rmtree") => DeleteTree,
        (Language::Python, "os.remove" | "os.unlink") => DeleteFile,
        (Language::Ruby, "IO.popen" | "Kernel.system" | "Kernel.exec") => Run,
        (Language::Ruby, "File.delete" | "File.unlink" | "FileUtils.rm" | "FileUtils.rm_f") => {
            DeleteFile
        }
        (Language::Ruby, "File.open" | "File.write" | "IO.write" | "File.new") => Open,
        _ => return None,
    })
}

/// Calls by their last name component (`cp.execSync`, `sp.run`, `system`).
fn last_name(lang: Language, name: &str) -> Option<Kind> {
    Some(match (lang, name) {
        (
            Language::Python,
            "system" | "popen" | "run" | "call" | "check_call" | "check_output" | "Popen"
            | "getoutput" | "getstatusoutput",
        ) => RunIfLiteral,
        (Language::Python, "rmtree") => DeleteTree,
        (Language::Python, "remove" | "unlink") => DeleteFile,
        (Language::Python, "open") => Open,
        (Language::Perl, "system" | "exec") => Run,
        (Language::Perl, "rmtree" | "remove_tree") => DeleteTree,
        (Language::Perl, "unlink") => DeleteFile,
        (Language::Perl, "open" | "sysopen") => Open,
        (Language::Ruby, "system" | "spawn" | "capture2" | "capture2e" | "capture3" | "popen3") => {
            Run
        }
        (Language::Ruby, "exec" | "popen") => RunIfLiteral,
        (
            Language::Ruby,
            "rm_rf" | "rm_r" | "remove_dir" | "remove_entry" | "remove_entry_secure" | "rmtree",
        ) => DeleteTree,
        (Language::Node, "execSync" | "spawnSync" | "execFileSync") => Run,
        (Language::Node, "exec" | "spawn" | "execFile") => RunIfLiteral,
        (Language::Node, "rmSync" | "rm" | "rmdirSync" | "rmdir") => DeleteMaybeTree,
        (Language::Node, "unlinkSync" | "unlink") => DeleteFile,
        (
            Language::Node,
            "writeFileSync" | "writeFile" | "appendFileSync" | "createWriteStream" | "openSync",
        ) => Open,
        (Language::Php, "system" | "shell_exec" | "passthru" | "popen" | "proc_open") => Run,
        (Language::Php, "exec") => RunIfLiteral,
        (Language::Php, "unlink") => DeleteFile,
        (Language::Php, "fopen" | "file_put_contents") => Open,
        _ => return None,
    })
}

/// Expressions that name the home directory.
const HOME_EXPRS: [&str; 16] = [
    "os.path.expanduser('~')",
    "os.path.expanduser(\"~\")",
    "os.environ['HOME']",
    "os.environ[\"HOME\"]",
    "os.getenv('HOME')",
    "os.getenv(\"HOME\")",
    "Path.home()",
    "pathlib.Path.home()",
    "os.homedir()",
    "require('os').homedir()",
    "process.env.HOME",
    "Dir.home",
    "ENV['HOME']",
    "ENV[\"HOME\"]",
    "$ENV{HOME}",
    "getenv('HOME')",
];

/// What `code` (the inline program of `lang`) obviously does outside
/// itself, in order, at most [`MAX_ACTIONS`].
pub fn scan(lang: Language, code: &str) -> Vec<Action> {
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() && out.len() < MAX_ACTIONS {
        let c = chars[i];
        if is_quote(lang, c) {
            let end = string_end(&chars, i);
            // Backticks run a shell in Perl, Ruby and PHP.
            if c == '`' && lang != Language::Node {
                let body: String = chars[i + 1..end.saturating_sub(1).max(i + 1)]
                    .iter()
                    .collect();
                out.push(shell_or_dynamic(lang, &body, &format!("`{body}`")));
            }
            i = end;
            continue;
        }
        if let Some((open, close)) = quote_operator(lang, &chars, i) {
            if let Some(end) = find_close(&chars, open, close) {
                let body: String = chars[open + 1..end].iter().collect();
                let raw: String = chars[i..=end].iter().collect();
                out.push(shell_or_dynamic(lang, &body, &raw));
                i = end + 1;
                continue;
            }
            break;
        }
        if !is_ident_start(c) || (i > 0 && is_ident(chars[i - 1])) {
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len()
            && (is_ident(chars[i])
                || (chars[i] == '.' && i + 1 < chars.len() && is_ident_start(chars[i + 1])))
        {
            i += 1;
        }
        let name: String = chars[start..i].iter().collect();
        let last = name.rsplit('.').next().unwrap_or(&name);
        let kind = full_name(lang, &name).or_else(|| last_name(lang, last));
        let Some(kind) = kind else {
            continue;
        };
        let mut j = i;
        while j < chars.len() && chars[j] == ' ' {
            j += 1;
        }
        let (args_start, args_end, next) = match chars.get(j) {
            Some('(') => match find_close(&chars, j, ')') {
                Some(end) => (j + 1, end, end + 1),
                None => break,
            },
            // Perl and Ruby call without parentheses: `system "…";`.
            Some(q)
                if matches!(lang, Language::Perl | Language::Ruby)
                    && j > i
                    && (*q == '"' || *q == '\'') =>
            {
                let end = statement_end(&chars, j);
                (j, end, end)
            }
            _ => continue,
        };
        let raw_call: String = chars[start..next.min(chars.len())].iter().collect();
        let args: Vec<Expr> = split_args(&chars[args_start..args_end])
            .into_iter()
            .map(|a| expr(lang, a.trim()))
            .collect();
        if let Some(action) = act(lang, kind, last, &args, &raw_call) {
            out.push(action);
        }
        i = args_start;
    }
    out
}

/// An argument expression.
#[derive(Debug, Clone)]
enum Expr {
    Str {
        value: String,
        computed: bool,
        raw: String,
    },
    List(Vec<Expr>, String),
    Other(String),
}

impl Expr {
    fn arg(&self) -> Arg {
        match self {
            Expr::Str {
                value,
                computed: false,
                ..
            } => Arg::Lit(value.clone()),
            Expr::Str { raw, .. } | Expr::List(_, raw) => Arg::Computed(raw.clone()),
            Expr::Other(raw) if HOME_EXPRS.contains(&raw.as_str()) => Arg::Home,
            Expr::Other(raw) => Arg::Computed(raw.clone()),
        }
    }

    fn literal(&self) -> Option<&str> {
        match self {
            Expr::Str {
                value,
                computed: false,
                ..
            } => Some(value),
            _ => None,
        }
    }

    fn raw(&self) -> &str {
        match self {
            Expr::Str { raw, .. } | Expr::List(_, raw) | Expr::Other(raw) => raw,
        }
    }
}

fn act(lang: Language, kind: Kind, name: &str, args: &[Expr], call: &str) -> Option<Action> {
    let first = args.first()?;
    match kind {
        Run | RunIfLiteral => {
            let program = match first {
                Expr::List(items, _) => {
                    return Some(Action::Argv(items.iter().map(Expr::arg).collect()));
                }
                e => e.literal(),
            };
            let Some(program) = program else {
                return (kind == Run).then(|| Action::Dynamic(call.to_string()));
            };
            // `spawn('rm', ['-rf', '/'])`
            if let Some(Expr::List(items, _)) = args.get(1) {
                let mut argv = vec![Arg::Lit(program.to_string())];
                argv.extend(items.iter().map(Expr::arg));
                return Some(Action::Argv(argv));
            }
            // `system('rm', '-rf', '/')` (Perl, Ruby, PHP's proc_open aside)
            let strings: Vec<&Expr> = args
                .iter()
                .take_while(|a| matches!(a, Expr::Str { .. }))
                .collect();
            if strings.len() > 1 && matches!(lang, Language::Perl | Language::Ruby) {
                return Some(Action::Argv(strings.iter().map(|e| e.arg()).collect()));
            }
            Some(Action::Shell(program.to_string()))
        }
        DeleteTree => Some(Action::Delete {
            recursive: true,
            target: first.arg(),
        }),
        DeleteMaybeTree => {
            let recursive = args[1..]
                .iter()
                .any(|a| a.raw().contains("recursive") && a.raw().contains("true"));
            let target = first.arg();
            (recursive || !matches!(target, Arg::Computed(_)))
                .then_some(Action::Delete { recursive, target })
        }
        DeleteFile => {
            let target = first.arg();
            (!matches!(target, Arg::Computed(_))).then_some(Action::Delete {
                recursive: false,
                target,
            })
        }
        Open => {
            let by_name = name.contains("write") || name.contains("Write") || name.contains("put");
            let by_mode = args
                .iter()
                .skip(1)
                .any(|a| a.literal().is_some_and(is_write_mode));
            // Perl: open(F, ">/dev/sda") carries the mode in the path.
            let path = args.iter().find_map(|a| {
                let lit = a.literal()?;
                let trimmed = lit.trim_start_matches(['+', '<', '>', '&', ' ']);
                (trimmed.starts_with('/') || trimmed.starts_with('~')).then(|| {
                    (
                        trimmed.to_string(),
                        lit.len() != trimmed.len() && lit.contains('>'),
                    )
                })
            });
            let (path, embedded) = path?;
            (by_name || by_mode || embedded).then_some(Action::Write(Arg::Lit(path)))
        }
    }
}

/// `'w'`, `"a+"`, `'>'`, `"r+b"`: a mode that writes.
fn is_write_mode(mode: &str) -> bool {
    !mode.is_empty()
        && mode.len() <= 4
        && mode.chars().all(|c| "rwabxt+<>".contains(c))
        && mode.chars().any(|c| "wax+>".contains(c))
}

fn shell_or_dynamic(lang: Language, body: &str, raw: &str) -> Action {
    if interpolates(lang, '"', body) {
        Action::Dynamic(raw.to_string())
    } else {
        Action::Shell(body.to_string())
    }
}

fn expr(lang: Language, raw: &str) -> Expr {
    if let Some((value, computed)) = string_literal(lang, raw) {
        return Expr::Str {
            value,
            computed,
            raw: raw.to_string(),
        };
    }
    let list = raw
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .or_else(|| {
            // Perl: qw(rm -rf /)
            raw.strip_prefix("qw(").and_then(|r| r.strip_suffix(')'))
        });
    if let Some(inner) = list {
        let chars: Vec<char> = inner.chars().collect();
        let items = if raw.starts_with("qw(") {
            inner
                .split_whitespace()
                .map(|w| Expr::Str {
                    value: w.to_string(),
                    computed: false,
                    raw: w.to_string(),
                })
                .collect()
        } else {
            split_args(&chars)
                .into_iter()
                .map(|a| a.trim().to_string())
                .filter(|a| !a.is_empty())
                .map(|a| expr(lang, &a))
                .collect()
        };
        return Expr::List(items, raw.to_string());
    }
    Expr::Other(raw.to_string())
}

/// The value of `raw` when it is exactly one string literal, and whether
/// the language fills parts of it in at run time.
fn string_literal(lang: Language, raw: &str) -> Option<(String, bool)> {
    let mut body = raw;
    let mut prefix = "";
    if lang == Language::Python {
        let cut = raw
            .find(['\'', '"'])
            .filter(|&n| n <= 2 && raw[..n].chars().all(|c| "rRbBuUfF".contains(c)))?;
        prefix = &raw[..cut];
        body = &raw[cut..];
    }
    let q = body.chars().next()?;
    if !is_quote(lang, q) {
        return None;
    }
    let triple: String = std::iter::repeat_n(q, 3).collect();
    let inner = if body.len() >= 6 && body.starts_with(&triple) && body.ends_with(&triple) {
        &body[3..body.len() - 3]
    } else if body.len() >= 2 && body.ends_with(q) {
        &body[q.len_utf8()..body.len() - q.len_utf8()]
    } else {
        return None;
    };
    let chars: Vec<char> = body.chars().collect();
    if string_end(&chars, 0) != chars.len() && !body.starts_with(&triple) {
        return None;
    }
    let raw_string = prefix.contains(['r', 'R']);
    let computed = match lang {
        Language::Python => prefix.contains(['f', 'F']) && inner.contains('{'),
        _ => interpolates(lang, q, inner),
    };
    let value = if raw_string || (q == '\'' && lang != Language::Python && lang != Language::Node) {
        inner.replace("\\'", "'").replace("\\\\", "\\")
    } else {
        unescape(inner)
    };
    Some((value, computed))
}

/// Whether a string in quotes `q` of `lang` substitutes values into `body`.
fn interpolates(lang: Language, q: char, body: &str) -> bool {
    match (lang, q) {
        (Language::Node, '`') => body.contains("${"),
        (Language::Perl, '"' | '`') => body.contains(['$', '@']),
        (Language::Ruby, '"' | '`') => body.contains("#{"),
        (Language::Php, '"' | '`') => body.contains('$'),
        _ => false,
    }
}

fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some(c @ ('\\' | '\'' | '"' | '`' | '$')) => out.push(c),
            Some(c) => {
                out.push('\\');
                out.push(c);
            }
            None => out.push('\\'),
        }
    }
    out
}

fn is_quote(lang: Language, c: char) -> bool {
    c == '\'' || c == '"' || (c == '`' && lang != Language::Python)
}

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// `qx{…}` (Perl) and `%x(…)` (Ruby): where the body opens, and the
/// bracket that closes it.
fn quote_operator(lang: Language, chars: &[char], i: usize) -> Option<(usize, char)> {
    let at = |n: usize| chars.get(i + n).copied();
    let (open, after) = match lang {
        Language::Perl
            if at(0) == Some('q') && at(1) == Some('x') && (i == 0 || !is_ident(chars[i - 1])) =>
        {
            (i + 2, at(2)?)
        }
        Language::Ruby if at(0) == Some('%') && at(1) == Some('x') => (i + 2, at(2)?),
        _ => return None,
    };
    let close = match after {
        '(' => ')',
        '{' => '}',
        '[' => ']',
        '<' => '>',
        '/' | '|' | '!' => after,
        _ => return None,
    };
    Some((open, close))
}

/// The index just past the string literal opening at `start`.
fn string_end(chars: &[char], start: usize) -> usize {
    let q = chars[start];
    let triple = chars.get(start + 1) == Some(&q) && chars.get(start + 2) == Some(&q);
    let mut i = start + if triple { 3 } else { 1 };
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            c if c == q => {
                if !triple {
                    return i + 1;
                }
                if chars.get(i + 1) == Some(&q) && chars.get(i + 2) == Some(&q) {
                    return i + 3;
                }
                i += 1;
            }
            _ => i += 1,
        }
    }
    chars.len()
}

/// The index of the bracket `close` matching the opener at `open`,
/// skipping strings and nested brackets.
fn find_close(chars: &[char], open: usize, close: char) -> Option<usize> {
    let opener = chars[open];
    let mut depth = 0usize;
    let mut i = open;
    while i < chars.len() {
        let c = chars[i];
        if c == close && (depth == 1 || opener == close) && i > open {
            return Some(i);
        }
        if (c == '\'' || c == '"') && opener != close {
            i = string_end(chars, i);
            continue;
        }
        if matches!(c, '(' | '[' | '{') {
            depth += 1;
        } else if matches!(c, ')' | ']' | '}') {
            depth = depth.saturating_sub(1);
        }
        i += 1;
    }
    None
}

/// Where a Perl/Ruby statement without parentheses ends.
fn statement_end(chars: &[char], start: usize) -> usize {
    let mut i = start;
    let mut depth = 0usize;
    while i < chars.len() {
        match chars[i] {
            '\'' | '"' => {
                i = string_end(chars, i);
                continue;
            }
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' if depth == 0 => return i,
            ')' | ']' | '}' => depth -= 1,
            ';' | '\n' if depth == 0 => return i,
            _ => {}
        }
        i += 1;
    }
    chars.len()
}

/// The comma-separated parts of an argument list, at bracket depth 0.
fn split_args(chars: &[char]) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\'' | '"' | '`' => {
                let end = string_end(chars, i);
                current.extend(&chars[i..end]);
                i = end;
                continue;
            }
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                out.push(std::mem::take(&mut current));
                i += 1;
                continue;
            }
            _ => {}
        }
        current.push(c);
        i += 1;
    }
    if !current.trim().is_empty() {
        out.push(current);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use Language::*;

    fn lit(s: &str) -> Arg {
        Arg::Lit(s.to_string())
    }

    #[test]
    fn languages_are_known_by_program_name() {
        for (p, l) in [
            ("python", Python),
            ("python3", Python),
            ("python3.12", Python),
            ("pypy3", Python),
            ("perl", Perl),
            ("perl5.36", Perl),
            ("ruby", Ruby),
            ("node", Node),
            ("nodejs", Node),
            ("php", Php),
            ("php8.2", Php),
        ] {
            assert_eq!(language(p), Some(l), "{p}");
        }
        assert_eq!(language("pythonista"), None);
        assert_eq!(language("rubocop"), None);
    }

    #[test]
    fn shell_lines_and_argv_are_found() {
        let cases: &[(Language, &str, Vec<Action>)] = &[
            (
                Python,
                "import os; os.system('rm -rf ~')",
                vec![Action::Shell("rm -rf ~".into())],
            ),
            (
                Python,
                "import subprocess; subprocess.run(['rm','-rf','/'])",
                vec![Action::Argv(vec![lit("rm"), lit("-rf"), lit("/")])],
            ),
            (
                Python,
                "import subprocess as sp; sp.run(\"rm -rf /\", shell=True)",
                vec![Action::Shell("rm -rf /".into())],
            ),
            (
                Python,
                "import os; os.system('rm -rf ' + d)",
                vec![Action::Dynamic("os.system('rm -rf ' + d)".into())],
            ),
            (Python, "import asyncio; asyncio.run(main())", vec![]),
            (
                Perl,
                "system(\"rm -rf /\")",
                vec![Action::Shell("rm -rf /".into())],
            ),
            (
                Perl,
                "system 'rm', '-rf', '/';",
                vec![Action::Argv(vec![lit("rm"), lit("-rf"), lit("/")])],
            ),
            (Perl, "print `reboot`", vec![Action::Shell("reboot".into())]),
            (Perl, "qx{rm -rf /}", vec![Action::Shell("rm -rf /".into())]),
            (
                Perl,
                "system(\"rm -rf $d\")",
                vec![Action::Dynamic("system(\"rm -rf $d\")".into())],
            ),
            (Ruby, "%x(reboot)", vec![Action::Shell("reboot".into())]),
            (
                Ruby,
                "system 'rm -rf ~'",
                vec![Action::Shell("rm -rf ~".into())],
            ),
            (
                Node,
                "require('child_process').execSync('rm -rf /')",
                vec![Action::Shell("rm -rf /".into())],
            ),
            (
                Node,
                "require('child_process').spawnSync('rm', ['-rf', '/'])",
                vec![Action::Argv(vec![lit("rm"), lit("-rf"), lit("/")])],
            ),
            (Node, "/x/.exec(s)", vec![]),
            (Node, "console.log(`a ${b}`)", vec![]),
            (
                Php,
                "system('reboot');",
                vec![Action::Shell("reboot".into())],
            ),
            (
                Php,
                "echo `rm -rf /`;",
                vec![Action::Shell("rm -rf /".into())],
            ),
        ];
        for (lang, code, want) in cases {
            assert_eq!(&scan(*lang, code), want, "{lang:?} {code:?}");
        }
    }

    #[test]
    fn deletes_and_writes_are_found() {
        let tree = |t: Arg| Action::Delete {
            recursive: true,
            target: t,
        };
        let file = |t: Arg| Action::Delete {
            recursive: false,
            target: t,
        };
        let cases: &[(Language, &str, Vec<Action>)] = &[
            (
                Python,
                "import shutil; shutil.rmtree('/')",
                vec![tree(lit("/"))],
            ),
            (
                Python,
                "import shutil,os; shutil.rmtree(os.path.expanduser('~'))",
                vec![tree(Arg::Home)],
            ),
            (
                Python,
                "import shutil; shutil.rmtree(p)",
                vec![tree(Arg::Computed("p".into()))],
            ),
            (
                Python,
                "import os; os.remove('/etc/passwd')",
                vec![file(lit("/etc/passwd"))],
            ),
            (Python, "import os; os.remove(p)", vec![]),
            (
                Python,
                "open('/dev/sda', 'wb').write(b'x')",
                vec![Action::Write(lit("/dev/sda"))],
            ),
            (Python, "print(open('/dev/sda', 'rb').read(1))", vec![]),
            (
                Node,
                "require('fs').rmSync('/', {recursive: true, force: true})",
                vec![tree(lit("/"))],
            ),
            (
                Node,
                "fs.rmSync(process.env.HOME, {recursive:true})",
                vec![tree(Arg::Home)],
            ),
            (Node, "fs.rmSync('x.txt')", vec![file(lit("x.txt"))]),
            (
                Node,
                "fs.writeFileSync('/dev/sda', 'x')",
                vec![Action::Write(lit("/dev/sda"))],
            ),
            (
                Ruby,
                "File.delete('/etc/hosts')",
                vec![file(lit("/etc/hosts"))],
            ),
            (
                Ruby,
                "require 'fileutils'; FileUtils.rm_rf('/')",
                vec![tree(lit("/"))],
            ),
            (Ruby, "FileUtils.rm_rf(Dir.home)", vec![tree(Arg::Home)]),
            (Perl, "use File::Path; rmtree('/')", vec![tree(lit("/"))]),
            (
                Perl,
                "open(my $f, '>', '/dev/sda')",
                vec![Action::Write(lit("/dev/sda"))],
            ),
            (
                Perl,
                "open(F, \">/dev/sda\")",
                vec![Action::Write(lit("/dev/sda"))],
            ),
            (Php, "unlink('/etc/hosts');", vec![file(lit("/etc/hosts"))]),
            (
                Php,
                "file_put_contents('/dev/sda', 'x');",
                vec![Action::Write(lit("/dev/sda"))],
            ),
        ];
        for (lang, code, want) in cases {
            assert_eq!(&scan(*lang, code), want, "{lang:?} {code:?}");
        }
    }

    #[test]
    fn strings_are_read_as_the_language_does() {
        assert_eq!(
            string_literal(Python, r#"r'a\nb'"#),
            Some((r"a\nb".to_string(), false))
        );
        assert_eq!(
            string_literal(Python, r#""a\"b""#),
            Some(("a\"b".into(), false))
        );
        assert_eq!(string_literal(Python, "f'{x}'"), Some(("{x}".into(), true)));
        assert_eq!(string_literal(Python, "'''x'''"), Some(("x".into(), false)));
        assert_eq!(string_literal(Python, "'a' + b"), None);
        assert_eq!(string_literal(Perl, "\"$x\""), Some(("$x".into(), true)));
        assert_eq!(string_literal(Perl, "'$x'"), Some(("$x".into(), false)));
        assert_eq!(
            string_literal(Ruby, "\"#{x}\""),
            Some(("#{x}".into(), true))
        );
    }

    #[test]
    fn unbalanced_code_ends_the_scan_without_panicking() {
        for code in [
            "os.system('rm",
            "system(",
            "qx{",
            "%x(",
            "'",
            "\"\\",
            "f(('",
        ] {
            for lang in [Python, Perl, Ruby, Node, Php] {
                let _ = scan(lang, code);
            }
        }
    }
}
