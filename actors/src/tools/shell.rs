//! shell: turns a bash command line into the flat list of simple commands it
//! would run, so the permission policy ([`super::policy`]) can judge each one.
//!
//! Parsing is done by `brush-parser` (the parser of the brush shell), never
//! by splitting strings. The walk descends into everything that runs code:
//! pipelines, `&&`/`||`/`;` lists, subshells, brace groups, loops, `if`,
//! `case`, function bodies, `$(...)` and backticks (inside any word, double
//! quotes, assignments, parameter defaults and arithmetic), process
//! substitutions, heredocs, and code handed to another interpreter:
//! `bash -c '...'`, `sh -c`, `eval`, `su -c`, `watch`, a heredoc or
//! here-string fed to a shell, `echo '...' | sh`, `ssh host cmd`, `flock -c`,
//! `script -c`, `parallel`, commands git runs from `git -c` configuration,
//! and variables whose value another program runs (`GIT_PAGER=…`,
//! `EDITOR=…`). Wrappers (`sudo`, `doas`, `env`, `xargs`, `timeout`, `nice`,
//! `ionice`, `nohup`, `setsid`, `stdbuf`, `chroot`, `flock`, `command`,
//! `exec`, `busybox`, `strace`, `unshare`, `find -exec`, ...) are recorded
//! and so is the command they wrap; arguments filled in from input (`xargs`, `parallel`) are
//! marked unknown. An interpreter's inline code (`python3 -c`, `perl -e`,
//! ...) is scanned by [`super::inline_code`]: the shell lines it hands on
//! are parsed, its deletes become `rm` commands and its writes redirects.
//! Output redirections are recorded with their targets.
//!
//! **Invariant**: this module only describes; it decides nothing. Anything it
//! cannot see through (a word computed at run time) is marked as such rather
//! than guessed.
//! **Invariant**: parsing never recurses without a bound: input size, bracket
//! depth, nested parses and nested interpreters are all capped, and going
//! past a cap is a [`ParseError`], which the policy treats as "needs
//! permission".

use std::io::Cursor;
use std::ops::Range;
use std::rc::Rc;

use brush_parser::ast;

use super::inline_code;
use brush_parser::word::{
    self, BraceExpressionMember, BraceExpressionOrText, Parameter, ParameterExpr,
    ParameterTestType, TildeExpr, WordPiece,
};

/// Longest command line the parser accepts, in bytes.
pub const MAX_COMMAND_BYTES: usize = 256 * 1024;
/// Deepest bracket nesting accepted (guards the recursive parser's stack).
pub const MAX_BRACKET_DEPTH: usize = 64;
/// Deepest chain of code handed to another shell (`bash -c "eval '...'"`).
pub const MAX_CODE_DEPTH: usize = 4;
/// Most words one brace expansion may produce before it counts as unknown.
pub const MAX_BRACE_WORDS: usize = 64;
/// Most nested parses (substitutions, `-c` strings, heredocs fed to a shell)
/// in one command line: bounds the work one check can cost.
pub const MAX_NESTED_PARSES: usize = 1024;

/// Why a command line could not be turned into simple commands.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("the command is empty")]
    Empty,
    #[error("the command is {len} bytes long; at most {max} can be checked")]
    TooLong { len: usize, max: usize },
    #[error("{context} nests brackets more than {max} levels deep")]
    TooDeep { context: String, max: usize },
    #[error("{context} hands code to another shell more than {max} levels deep")]
    CodeTooDeep { context: String, max: usize },
    #[error("the command holds more than {max} command substitutions and nested scripts")]
    TooManyNested { max: usize },
    #[error("{context} is not valid bash: {message}")]
    Syntax { context: String, message: String },
}

/// One piece of a word after quote removal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    /// Text whose value is known now (quotes removed, escapes applied).
    /// Unquoted glob characters stay as they are.
    Lit(String),
    /// `~`, `$HOME` or `${HOME}`: the user's home directory.
    Home,
    /// `$NAME` / `${NAME}`. `guarded` when the expansion can't be empty
    /// (`${NAME:?}`, `${NAME:-default}` with a non-empty default).
    Var { name: String, guarded: bool },
    /// Anything else computed at run time (`$(...)`, `$((...))`, `$1`,
    /// `${x/a/b}`, `<(...)`), as written.
    Dynamic(String),
}

/// A shell word: what was written, and what it is made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Word {
    /// As written in the command line (quotes included).
    pub raw: String,
    pub parts: Vec<Part>,
    /// Commands (indices into [`Script::commands`]) found in substitutions
    /// inside this word.
    subst: Range<usize>,
}

impl Word {
    fn literal_word(text: &str) -> Word {
        Word {
            raw: text.to_string(),
            parts: vec![Part::Lit(text.to_string())],
            subst: 0..0,
        }
    }

    /// The value, when nothing in it is computed at run time.
    pub fn literal(&self) -> Option<String> {
        let mut out = String::new();
        for p in &self.parts {
            match p {
                Part::Lit(s) => out.push_str(s),
                _ => return None,
            }
        }
        Some(out)
    }

    /// The value with quotes removed and run-time parts kept as written
    /// (`~` for the home directory): `"$HOME"/x` → `~/x`.
    pub fn text(&self) -> String {
        self.render("~")
    }

    /// The value as the shell passes it on to code it runs: like
    /// [`Word::text`] but the home directory stays `$HOME`.
    fn code_text(&self) -> String {
        self.render("$HOME")
    }

    fn render(&self, home: &str) -> String {
        let mut out = String::new();
        for p in &self.parts {
            match p {
                Part::Lit(s) => out.push_str(s),
                Part::Home => out.push_str(home),
                Part::Var { name, .. } => {
                    out.push('$');
                    out.push_str(name);
                }
                Part::Dynamic(raw) => out.push_str(raw),
            }
        }
        out
    }

    /// True when some part (other than the home directory) is only known at
    /// run time.
    pub fn is_runtime(&self) -> bool {
        self.parts
            .iter()
            .any(|p| matches!(p, Part::Var { .. } | Part::Dynamic(_)))
    }

    /// The first run-time part, as written (for messages).
    fn first_runtime(&self) -> Option<String> {
        self.parts.iter().find_map(|p| match p {
            Part::Var { name, .. } => Some(format!("${name}")),
            Part::Dynamic(raw) => Some(raw.clone()),
            _ => None,
        })
    }
}

/// One simple command that would run: a program and its arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimpleCommand {
    /// Program name and arguments; assignments and redirections removed.
    pub argv: Vec<Word>,
    /// How it is reached when not written directly, innermost first, e.g.
    /// "`bash -c` code" or "command substitution".
    pub via: Option<String>,
    /// A wrapper or interpreter whose real work is the inner command(s),
    /// which are in the list too (`timeout 5 cargo test`, `bash -c 'ls'`).
    /// The policy's allow rules need not cover it.
    pub transparent: bool,
    /// Its output is run as code by an interpreter (`curl … | sh`,
    /// `bash <(curl …)`, `eval "$(curl …)"`).
    pub feeds_code: bool,
    /// Code handed to an interpreter here is built at run time (`bash -c
    /// "$X"`, `eval "$(...)"`); holds the part that is not known, as written.
    pub dynamic_code: Option<String>,
    /// Runs in the background or in a pipeline with other commands.
    pub concurrent: bool,
    /// Some of its arguments are only filled in at run time, from data or
    /// by code (`xargs rm -rf`, `shutil.rmtree(path)`): says where they
    /// come from ("come from the input of `xargs`").
    pub unknown_args: Option<String>,
    /// It runs on another host (`ssh HOST cmd`): the host as written.
    pub remote: Option<String>,
}

impl SimpleCommand {
    /// The command as written (words joined by spaces).
    pub fn display(&self) -> String {
        self.argv
            .iter()
            .map(|w| w.raw.as_str())
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The program's base name when it is known now (`/bin/rm` → `rm`).
    pub fn program(&self) -> Option<String> {
        self.argv
            .first()
            .and_then(|w| w.literal())
            .map(|s| basename(&s).to_string())
    }

    /// The arguments after the program name.
    pub fn args(&self) -> &[Word] {
        self.argv.get(1..).unwrap_or(&[])
    }
}

/// A redirection (`> file`, `>> file`, `< file`, `&> file`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redirect {
    pub fd: Option<i32>,
    /// True for anything that opens the target for writing.
    pub write: bool,
    pub target: Word,
    /// The command it belongs to, as written.
    pub command: String,
}

/// Everything a command line would run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Script {
    pub commands: Vec<SimpleCommand>,
    pub redirects: Vec<Redirect>,
    /// Functions that call themselves in a pipeline or in the background
    /// (`:(){ :|:& };:`), by name.
    pub fork_bombs: Vec<String>,
}

/// Parses `command` and collects every simple command it would run.
pub fn parse(command: &str) -> Result<Script, ParseError> {
    if command.trim().is_empty() {
        return Err(ParseError::Empty);
    }
    if command.len() > MAX_COMMAND_BYTES {
        return Err(ParseError::TooLong {
            len: command.len(),
            max: MAX_COMMAND_BYTES,
        });
    }
    let mut walker = Walker {
        script: Script::default(),
        parses: 0,
        vars: std::collections::HashMap::new(),
    };
    let frame = Frame {
        src: Rc::from(""),
        via: None,
        code_depth: 0,
        concurrent: false,
        unknown_args: None,
        remote: None,
    };
    // brush-parser is not ours: a panic inside it becomes a parse error
    // (and so a refusal) instead of taking the session down.
    let walked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        walker.source(command, "the command", &frame)
    }));
    match walked {
        Ok(result) => result.map(|()| walker.script),
        Err(_) => Err(ParseError::Syntax {
            context: "the command".to_string(),
            message: "the bash parser failed on it".to_string(),
        }),
    }
}

/// `/usr/bin/rm` → `rm`.
pub fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// Where the walk is: what tags new records, and how deep we are.
#[derive(Clone)]
struct Frame {
    /// The text being parsed (source locations index its characters).
    src: Rc<str>,
    via: Option<String>,
    code_depth: usize,
    concurrent: bool,
    /// See [`SimpleCommand::unknown_args`].
    unknown_args: Option<String>,
    /// See [`SimpleCommand::remote`].
    remote: Option<String>,
}

impl Frame {
    fn via(&self, via: impl Into<String>) -> Frame {
        Frame {
            via: Some(via.into()),
            ..self.clone()
        }
    }
}

/// What a command's standard input is, when that matters (a shell reading
/// code from it).
enum Stdin {
    Inherited,
    Heredoc(Word),
    HereString(Word),
    ProcessSubstitution(Range<usize>),
}

/// What one pipeline stage is, for the stages around it.
#[derive(Default)]
struct Stage {
    /// Reads code from stdin; `Some(true)` for a shell.
    reads_code: Option<bool>,
    /// Static text it prints (`echo …`, `printf …`).
    prints: Option<String>,
}

/// A simple command's words, stdin and redirections, as they are read.
struct Words {
    argv: Vec<Word>,
    stdin: Stdin,
    redirects: Vec<Redirect>,
}

impl Default for Words {
    fn default() -> Self {
        Words {
            argv: Vec::new(),
            stdin: Stdin::Inherited,
            redirects: Vec::new(),
        }
    }
}

struct Walker {
    script: Script,
    parses: usize,
    /// Variables set to a literal by a plain assignment seen so far
    /// (`DIR=build; rm -rf "$DIR"`), in the order the walk meets them: a
    /// guess like following `cd`, forgotten when anything else sets them.
    vars: std::collections::HashMap<String, String>,
}

impl Walker {
    /// Parses `src` as a bash program and walks it.
    fn source(&mut self, src: &str, context: &str, frame: &Frame) -> Result<(), ParseError> {
        self.parses += 1;
        if self.parses > MAX_NESTED_PARSES {
            return Err(ParseError::TooManyNested {
                max: MAX_NESTED_PARSES,
            });
        }
        check_brackets(src, context)?;
        let options = brush_parser::ParserOptions::default();
        let mut parser = brush_parser::Parser::new(Cursor::new(src.as_bytes()), &options);
        let program = parser.parse_program().map_err(|e| ParseError::Syntax {
            context: context.to_string(),
            message: e.to_string(),
        })?;
        let frame = Frame {
            src: Rc::from(src),
            ..frame.clone()
        };
        for list in &program.complete_commands {
            self.compound_list(list, &frame)?;
        }
        Ok(())
    }

    fn compound_list(&mut self, list: &ast::CompoundList, frame: &Frame) -> Result<(), ParseError> {
        for ast::CompoundListItem(and_or, sep) in &list.0 {
            let frame = if matches!(sep, ast::SeparatorOperator::Async) {
                Frame {
                    concurrent: true,
                    ..frame.clone()
                }
            } else {
                frame.clone()
            };
            self.pipeline(&and_or.first, &frame)?;
            for next in &and_or.additional {
                match next {
                    ast::AndOr::And(p) | ast::AndOr::Or(p) => self.pipeline(p, &frame)?,
                }
            }
        }
        Ok(())
    }

    fn pipeline(&mut self, pipeline: &ast::Pipeline, frame: &Frame) -> Result<(), ParseError> {
        let frame = if pipeline.seq.len() > 1 {
            Frame {
                concurrent: true,
                ..frame.clone()
            }
        } else {
            frame.clone()
        };
        let mut stages: Vec<(usize, Stage)> = Vec::new();
        for cmd in &pipeline.seq {
            let start = self.script.commands.len();
            let stage = self.command(cmd, &frame)?;
            stages.push((start, stage));
        }
        for k in 1..stages.len() {
            let Some(is_shell) = stages[k].1.reads_code else {
                continue;
            };
            // Everything before an interpreter that reads stdin feeds it code.
            let end = stages[k].0;
            for c in &mut self.script.commands[..end] {
                c.feeds_code = true;
            }
            if is_shell && let Some(text) = stages[k - 1].1.prints.clone() {
                let reader = self
                    .script
                    .commands
                    .get(stages[k].0..)
                    .and_then(|cs| cs.iter().rev().find_map(|c| c.program()))
                    .unwrap_or_else(|| "sh".to_string());
                let via = format!("text piped into `{reader}`");
                self.code(&text, &via, &frame)?;
            }
        }
        Ok(())
    }

    fn command(&mut self, cmd: &ast::Command, frame: &Frame) -> Result<Stage, ParseError> {
        match cmd {
            ast::Command::Simple(simple) => self.simple(simple, frame),
            ast::Command::Compound(compound, redirects) => {
                self.compound(compound, frame)?;
                self.redirect_list(redirects.as_ref(), &one_line(compound), frame)?;
                Ok(Stage::default())
            }
            ast::Command::Function(def) => {
                self.function(def, frame)?;
                Ok(Stage::default())
            }
            ast::Command::ExtendedTest(test, redirects) => {
                self.extended_test(&test.expr, frame)?;
                self.redirect_list(redirects.as_ref(), &one_line(test), frame)?;
                Ok(Stage::default())
            }
        }
    }

    fn compound(&mut self, cmd: &ast::CompoundCommand, frame: &Frame) -> Result<(), ParseError> {
        use ast::CompoundCommand as C;
        match cmd {
            C::Arithmetic(a) => self.arithmetic_command(a, frame),
            C::ArithmeticForClause(f) => {
                for e in [&f.initializer, &f.condition, &f.updater]
                    .into_iter()
                    .flatten()
                {
                    self.arithmetic(&e.value, frame)?;
                }
                self.compound_list(&f.body.list, frame)
            }
            C::BraceGroup(b) => self.compound_list(&b.list, frame),
            C::Subshell(s) => self.compound_list(&s.list, frame),
            C::ForClause(f) => {
                let mut values = Vec::new();
                for w in f.values.iter().flatten() {
                    values.extend(self.expanded_words(w, frame)?);
                }
                // A short list of plain values: the body once per value,
                // so `for d in build dist; do rm -rf "$d"; done` is known.
                let plain: Option<Vec<String>> = values
                    .iter()
                    .map(|w| w.literal().filter(|v| plain_value(v)))
                    .collect();
                match plain {
                    Some(plain) if !plain.is_empty() && plain.len() <= MAX_LOOP_VALUES => {
                        for v in plain {
                            self.vars.insert(f.variable_name.clone(), v);
                            self.compound_list(&f.body.list, frame)?;
                        }
                        self.vars.remove(&f.variable_name);
                        Ok(())
                    }
                    _ => {
                        self.vars.remove(&f.variable_name);
                        self.compound_list(&f.body.list, frame)
                    }
                }
            }
            C::CaseClause(c) => {
                self.word(&c.value, frame)?;
                for item in &c.cases {
                    for p in &item.patterns {
                        self.word(p, frame)?;
                    }
                    if let Some(list) = &item.cmd {
                        self.compound_list(list, frame)?;
                    }
                }
                Ok(())
            }
            C::IfClause(i) => {
                self.compound_list(&i.condition, frame)?;
                self.compound_list(&i.then, frame)?;
                for e in i.elses.iter().flatten() {
                    if let Some(c) = &e.condition {
                        self.compound_list(c, frame)?;
                    }
                    self.compound_list(&e.body, frame)?;
                }
                Ok(())
            }
            C::WhileClause(w) | C::UntilClause(w) => {
                self.compound_list(&w.0, frame)?;
                self.compound_list(&w.1.list, frame)
            }
            C::Coprocess(c) => {
                let frame = Frame {
                    concurrent: true,
                    ..frame.clone()
                };
                self.command(&c.body, &frame).map(|_| ())
            }
        }
    }

    fn function(&mut self, def: &ast::FunctionDefinition, frame: &Frame) -> Result<(), ParseError> {
        let name = def.fname.value.clone();
        let start = self.script.commands.len();
        let inner = frame.via(format!("function `{name}`"));
        let ast::FunctionBody(body, redirects) = &def.body;
        self.compound(body, &inner)?;
        self.redirect_list(redirects.as_ref(), &one_line(def), &inner)?;
        let bomb = self.script.commands[start..].iter().any(|c| {
            c.concurrent && c.argv.first().and_then(|w| w.literal()).as_deref() == Some(&name)
        });
        if bomb {
            self.script.fork_bombs.push(name);
        }
        Ok(())
    }

    fn extended_test(
        &mut self,
        expr: &ast::ExtendedTestExpr,
        frame: &Frame,
    ) -> Result<(), ParseError> {
        use ast::ExtendedTestExpr as E;
        match expr {
            E::And(a, b) | E::Or(a, b) => {
                self.extended_test(a, frame)?;
                self.extended_test(b, frame)
            }
            E::Not(a) | E::Parenthesized(a) => self.extended_test(a, frame),
            E::UnaryTest(_, w) => self.word(w, frame).map(|_| ()),
            E::BinaryTest(_, a, b) => {
                self.word(a, frame)?;
                self.word(b, frame).map(|_| ())
            }
        }
    }

    /// `(( … ))`. brush-parser also reads `( (ls) )` and `((ls) )` as
    /// arithmetic, where bash runs nested subshells: bash's arithmetic
    /// command is written `((` … `))` with no space, so anything else is
    /// parsed again as a subshell (one paren stripped from each end).
    fn arithmetic_command(
        &mut self,
        a: &ast::ArithmeticCommand,
        frame: &Frame,
    ) -> Result<(), ParseError> {
        let text: String = frame
            .src
            .chars()
            .skip(a.loc.start.index)
            .take(a.loc.end.index.saturating_sub(a.loc.start.index))
            .collect();
        if text.starts_with("((") && text.ends_with("))") {
            return self.arithmetic(&a.expr.value, frame);
        }
        if text.len() >= 2 && text.starts_with('(') && text.ends_with(')') {
            return self.source(&text[1..text.len() - 1], "a subshell", frame);
        }
        // The location is unusable: read it both ways.
        self.arithmetic(&a.expr.value, frame)?;
        let _not_shell_code = self.source(&a.expr.value, "a subshell", frame);
        Ok(())
    }

    /// Finds the commands in an arithmetic expression (`$(( $(id -u) ))`).
    fn arithmetic(&mut self, text: &str, frame: &Frame) -> Result<(), ParseError> {
        self.word_text(text, frame).map(|_| ())
    }

    fn simple(&mut self, cmd: &ast::SimpleCommand, frame: &Frame) -> Result<Stage, ParseError> {
        let mut words = Words::default();
        let standalone = cmd.word_or_name.is_none();
        for item in cmd.prefix.iter().flat_map(|p| p.0.iter()) {
            self.item(item, standalone, frame, &mut words)?;
        }
        if let Some(name) = &cmd.word_or_name {
            let expanded = self.expanded_words(name, frame)?;
            words.argv.extend(expanded);
        }
        for item in cmd.suffix.iter().flat_map(|s| s.0.iter()) {
            self.item(item, false, frame, &mut words)?;
        }
        let Words {
            argv,
            stdin,
            redirects,
        } = words;
        let display = argv
            .iter()
            .map(|w| w.raw.as_str())
            .collect::<Vec<_>>()
            .join(" ");
        for mut r in redirects {
            r.command = display.clone();
            self.script.redirects.push(r);
        }
        let prints = printed_text(&argv);
        let reads_code = self.run(argv, &stdin, frame)?;
        Ok(Stage { reads_code, prints })
    }

    /// One prefix or suffix item of a simple command. `standalone`: a
    /// prefix of a command that is only assignments.
    fn item(
        &mut self,
        item: &ast::CommandPrefixOrSuffixItem,
        standalone: bool,
        frame: &Frame,
        words: &mut Words,
    ) -> Result<(), ParseError> {
        use ast::CommandPrefixOrSuffixItem as Item;
        match item {
            Item::IoRedirect(r) => {
                if let Some(s) = self.redirect(r, frame, &mut words.redirects)? {
                    words.stdin = s;
                }
            }
            Item::Word(w) => {
                let expanded = self.expanded_words(w, frame)?;
                words.argv.extend(expanded);
            }
            Item::AssignmentWord(a, w) => {
                if words.argv.is_empty() {
                    self.assignment(a, standalone, frame)?;
                } else {
                    // `export X=$(...)`, `local y=…`: an argument.
                    words.argv.push(self.word(w, frame)?);
                }
            }
            Item::ProcessSubstitution(kind, sub) => {
                let start = self.script.commands.len();
                self.compound_list(&sub.list, &frame.via("process substitution"))?;
                let raw = format!("{kind}({})", sub.list);
                words.argv.push(Word {
                    raw: raw.clone(),
                    parts: vec![Part::Dynamic(raw)],
                    subst: start..self.script.commands.len(),
                });
            }
        }
        Ok(())
    }

    fn assignment(
        &mut self,
        a: &ast::Assignment,
        standalone: bool,
        frame: &Frame,
    ) -> Result<(), ParseError> {
        if let ast::AssignmentName::ArrayElementName(_, index) = &a.name {
            self.word_text(index, frame)?;
        }
        match &a.value {
            ast::AssignmentValue::Scalar(w) => {
                let value = self.word(w, frame)?;
                if let ast::AssignmentName::VariableName(name) = &a.name {
                    self.code_var(name, &value.code_text(), frame)?;
                    // Only a plain value that a later `$NAME` repeats
                    // unchanged is remembered: no globs, no spaces.
                    match value.literal() {
                        Some(v) if standalone && plain_value(&v) => {
                            self.vars.insert(name.clone(), v);
                        }
                        _ => {
                            self.vars.remove(name);
                        }
                    }
                }
            }
            ast::AssignmentValue::Array(items) => {
                for (k, v) in items {
                    if let Some(k) = k {
                        self.word(k, frame)?;
                    }
                    self.word(v, frame)?;
                }
            }
        }
        Ok(())
    }

    fn redirect_list(
        &mut self,
        list: Option<&ast::RedirectList>,
        command: &str,
        frame: &Frame,
    ) -> Result<(), ParseError> {
        let mut out = Vec::new();
        for r in list.iter().flat_map(|l| l.0.iter()) {
            self.redirect(r, frame, &mut out)?;
        }
        for mut r in out {
            r.command = command.to_string();
            self.script.redirects.push(r);
        }
        Ok(())
    }

    /// Records a redirection; returns the stdin it sets up, if it does.
    fn redirect(
        &mut self,
        r: &ast::IoRedirect,
        frame: &Frame,
        out: &mut Vec<Redirect>,
    ) -> Result<Option<Stdin>, ParseError> {
        use ast::{IoFileRedirectKind as K, IoFileRedirectTarget as T, IoRedirect as R};
        let is_stdin = |fd: &Option<i32>| matches!(fd, None | Some(0));
        match r {
            R::File(fd, kind, target) => {
                let write = !matches!(kind, K::Read | K::DuplicateInput);
                match target {
                    T::Filename(w) => {
                        let target = self.word(w, frame)?;
                        out.push(Redirect {
                            fd: *fd,
                            write,
                            target,
                            command: String::new(),
                        });
                    }
                    T::Duplicate(w) => {
                        let target = self.word(w, frame)?;
                        // `>&2` duplicates a descriptor; `>& file` writes a file.
                        let is_fd = target.literal().is_some_and(|t| {
                            t == "-" || t.trim_end_matches('-').parse::<i32>().is_ok()
                        });
                        if !is_fd {
                            out.push(Redirect {
                                fd: *fd,
                                write,
                                target,
                                command: String::new(),
                            });
                        }
                    }
                    T::Fd(_) => {}
                    T::ProcessSubstitution(_, sub) => {
                        let start = self.script.commands.len();
                        self.compound_list(&sub.list, &frame.via("process substitution"))?;
                        let range = start..self.script.commands.len();
                        if matches!(kind, K::Read) && is_stdin(fd) {
                            return Ok(Some(Stdin::ProcessSubstitution(range)));
                        }
                    }
                }
                Ok(None)
            }
            R::OutputAndError(w, _append) => {
                let target = self.word(w, frame)?;
                out.push(Redirect {
                    fd: None,
                    write: true,
                    target,
                    command: String::new(),
                });
                Ok(None)
            }
            R::HereString(fd, w) => {
                let word = self.word(w, frame)?;
                Ok(is_stdin(fd).then_some(Stdin::HereString(word)))
            }
            R::HereDocument(fd, doc) => {
                let body = &doc.doc.value;
                let word = if doc.requires_expansion {
                    let pieces = word::parse_heredoc(body, &brush_parser::ParserOptions::default())
                        .map_err(|e| syntax("a heredoc", e))?;
                    let start = self.script.commands.len();
                    let mut parts = Vec::new();
                    self.pieces(body, &pieces, false, frame, &mut parts)?;
                    Word {
                        raw: body.clone(),
                        parts: merge_literals(parts),
                        subst: start..self.script.commands.len(),
                    }
                } else {
                    Word::literal_word(body)
                };
                Ok(is_stdin(fd).then_some(Stdin::Heredoc(word)))
            }
        }
    }

    /// A command word after brace expansion (`{rm,-rf,/}` is three words):
    /// each alternative parsed. More than [`MAX_BRACE_WORDS`] alternatives
    /// make one word that is only known at run time.
    fn expanded_words(&mut self, w: &ast::Word, frame: &Frame) -> Result<Vec<Word>, ParseError> {
        if !w.value.contains('{') {
            return Ok(vec![self.word(w, frame)?]);
        }
        let options = brush_parser::ParserOptions::default();
        let pieces = match word::parse_brace_expansions(&w.value, &options) {
            Ok(Some(pieces))
                if pieces
                    .iter()
                    .any(|p| matches!(p, BraceExpressionOrText::Expr(_))) =>
            {
                pieces
            }
            _ => return Ok(vec![self.word(w, frame)?]),
        };
        match brace_alternatives(&pieces) {
            Some(alternatives) => alternatives
                .iter()
                .filter(|a| !a.is_empty())
                .map(|a| self.word_text(a, frame))
                .collect(),
            None => {
                let mut word = self.word(w, frame)?;
                word.parts = vec![Part::Dynamic(w.value.clone())];
                Ok(vec![word])
            }
        }
    }

    /// Parses one word: quote removal, and a walk of every substitution in it.
    fn word(&mut self, w: &ast::Word, frame: &Frame) -> Result<Word, ParseError> {
        self.word_text(&w.value, frame)
    }

    fn word_text(&mut self, raw: &str, frame: &Frame) -> Result<Word, ParseError> {
        let pieces = word::parse(raw, &brush_parser::ParserOptions::default())
            .map_err(|e| syntax(&format!("the word `{raw}`"), e))?;
        let start = self.script.commands.len();
        let mut parts = Vec::new();
        self.pieces(raw, &pieces, false, frame, &mut parts)?;
        Ok(Word {
            raw: raw.to_string(),
            parts: merge_literals(parts),
            subst: start..self.script.commands.len(),
        })
    }

    fn pieces(
        &mut self,
        raw: &str,
        pieces: &[word::WordPieceWithSource],
        quoted: bool,
        frame: &Frame,
        out: &mut Vec<Part>,
    ) -> Result<(), ParseError> {
        for p in pieces {
            let written = || {
                raw.get(p.start_index..p.end_index)
                    .unwrap_or(raw)
                    .to_string()
            };
            match &p.piece {
                WordPiece::Text(s) | WordPiece::SingleQuotedText(s) => {
                    out.push(Part::Lit(s.clone()))
                }
                WordPiece::AnsiCQuotedText(s) => out.push(Part::Lit(ansi_c(s))),
                WordPiece::DoubleQuotedSequence(inner)
                | WordPiece::GettextDoubleQuotedSequence(inner) => {
                    self.pieces(raw, inner, true, frame, out)?;
                }
                WordPiece::TildeExpansion(TildeExpr::Home) => out.push(Part::Home),
                WordPiece::TildeExpansion(_) => out.push(Part::Dynamic(written())),
                WordPiece::ParameterExpansion(expr) => {
                    for nested in expr_strings(expr) {
                        self.word_text(nested, frame)?;
                    }
                    let part = match parameter_part(expr) {
                        Some(Part::Var { name, .. }) if self.vars.contains_key(&name) => {
                            Part::Lit(self.vars.get(&name).cloned().unwrap_or_default())
                        }
                        Some(part) => part,
                        None => Part::Dynamic(written()),
                    };
                    out.push(part);
                }
                WordPiece::CommandSubstitution(code) => {
                    self.source(
                        code,
                        "a command substitution",
                        &frame.via("command substitution"),
                    )?;
                    out.push(Part::Dynamic(written()));
                }
                WordPiece::BackquotedCommandSubstitution(code) => {
                    let code = unescape_backquoted(code);
                    self.source(
                        &code,
                        "a backquoted command",
                        &frame.via("command substitution"),
                    )?;
                    out.push(Part::Dynamic(written()));
                }
                WordPiece::EscapeSequence(s) => out.push(Part::Lit(unescape(s, quoted))),
                WordPiece::ArithmeticExpression(e) => {
                    self.word_text(&e.value, frame)?;
                    out.push(Part::Dynamic(written()));
                }
            }
        }
        Ok(())
    }

    /// Parses code handed to another shell.
    fn code(&mut self, code: &str, via: &str, frame: &Frame) -> Result<(), ParseError> {
        if frame.code_depth >= MAX_CODE_DEPTH {
            return Err(ParseError::CodeTooDeep {
                context: format!("the {via}"),
                max: MAX_CODE_DEPTH,
            });
        }
        let inner = Frame {
            via: Some(via.to_string()),
            code_depth: frame.code_depth + 1,
            ..frame.clone()
        };
        self.source(code, &format!("the {via}"), &inner)
    }

    /// Code made of `words`: marks what computes it as feeding code, notes
    /// run-time parts on record `at`, and parses the text.
    fn code_words(
        &mut self,
        at: usize,
        words: &[Word],
        via: &str,
        frame: &Frame,
    ) -> Result<(), ParseError> {
        for w in words {
            self.mark_feeds(w.subst.clone());
        }
        let dynamic = words.iter().find_map(|w| w.first_runtime());
        let text = words
            .iter()
            .map(|w| w.code_text())
            .collect::<Vec<_>>()
            .join(" ");
        if let Some(c) = self.script.commands.get_mut(at) {
            c.transparent = dynamic.is_none();
            c.dynamic_code = dynamic;
        }
        self.code(&text, via, frame)
    }

    /// A variable whose value another program runs as a command line
    /// (`GIT_PAGER='…' git log`, `env EDITOR=… git commit`, `export
    /// GIT_SSH_COMMAND=…`): the value is parsed as code.
    fn code_var(&mut self, name: &str, value: &str, frame: &Frame) -> Result<(), ParseError> {
        if !CODE_VARS.contains(&name) || value.trim().is_empty() {
            return Ok(());
        }
        self.code(value, &format!("`{name}` value"), frame)
    }

    /// `NAME=value` arguments (of `env`, `export`, `declare`, …) whose
    /// variable holds a command line.
    fn code_var_args(&mut self, args: &[Word], frame: &Frame) -> Result<(), ParseError> {
        for w in args {
            let text = w.code_text();
            if let Some((name, value)) = text.split_once('=')
                && is_assignment(&text)
            {
                self.code_var(name, value, frame)?;
            }
        }
        Ok(())
    }

    /// `git -c KEY=VALUE …`: configuration that git runs as a command
    /// (`core.pager`, `core.sshCommand`, a `!` alias, a filter driver, …)
    /// is parsed as code; a value only known at run time makes the code
    /// dynamic.
    fn git_config(&mut self, at: usize, args: &[Word], frame: &Frame) -> Result<(), ParseError> {
        let mut i = 0;
        while let Some(t) = args.get(i).and_then(Word::literal) {
            if !t.starts_with('-') {
                break;
            }
            let (pair, step) = match t.as_str() {
                "-c" => (args.get(i + 1), 2),
                "--config-env" => {
                    // The value comes from an environment variable.
                    if let Some(pair) = args.get(i + 1).map(Word::text)
                        && git_command_value(pair.split('=').next().unwrap_or_default(), "x")
                            .is_some()
                        && let Some(c) = self.script.commands.get_mut(at)
                    {
                        c.dynamic_code = Some(format!("--config-env {pair}"));
                    }
                    i += 2;
                    continue;
                }
                "-C" | "--git-dir" | "--work-tree" | "--namespace" | "--super-prefix" => (None, 2),
                _ => {
                    if let Some(pair) = t.strip_prefix("--config-env=")
                        && git_command_value(pair.split('=').next().unwrap_or_default(), "x")
                            .is_some()
                        && let Some(c) = self.script.commands.get_mut(at)
                    {
                        c.dynamic_code = Some(t.clone());
                    }
                    (None, 1)
                }
            };
            i += step;
            let Some(pair) = pair else {
                continue;
            };
            let text = pair.code_text();
            let Some((key, value)) = text.split_once('=') else {
                continue;
            };
            let Some(code) = git_command_value(key, value) else {
                continue;
            };
            if pair.is_runtime() {
                if let Some(c) = self.script.commands.get_mut(at) {
                    c.dynamic_code = pair.first_runtime();
                }
                continue;
            }
            self.code(&code, &format!("`git -c {key}` command"), frame)?;
        }
        Ok(())
    }

    fn mark_feeds(&mut self, range: Range<usize>) {
        for c in self.script.commands.get_mut(range).into_iter().flatten() {
            c.feeds_code = true;
        }
    }

    /// Records one command (and whatever it wraps). Returns whether it
    /// reads code from its stdin (`Some(true)` for a shell).
    fn run(
        &mut self,
        argv: Vec<Word>,
        stdin: &Stdin,
        frame: &Frame,
    ) -> Result<Option<bool>, ParseError> {
        let Some(first) = argv.first() else {
            return Ok(None);
        };
        let name = first.literal().map(|n| basename(&n).to_string());
        let at = self.script.commands.len();
        self.script.commands.push(SimpleCommand {
            argv: argv.clone(),
            via: frame.via.clone(),
            transparent: false,
            feeds_code: false,
            dynamic_code: None,
            concurrent: frame.concurrent,
            unknown_args: frame.unknown_args.clone(),
            remote: frame.remote.clone(),
        });
        let Some(name) = name else {
            return Ok(None);
        };
        let args = &argv[1..];

        // `command -v rm`: only says where `rm` is.
        if matches!(name.as_str(), "command" | "type" | "which")
            && args
                .first()
                .is_some_and(|w| matches!(w.literal().as_deref(), Some("-v" | "-V")))
        {
            return Ok(None);
        }
        if let Some(spec) = wrapper(&name) {
            let (inner, split) = wrapped_command(&spec, args);
            if let Some(code) = split {
                self.code_words(at, &[code], &format!("`{name} -S` string"), frame)?;
                return Ok(None);
            }
            if spec.assignments {
                let before = args.len() - inner.len();
                self.code_var_args(&args[..before], frame)?;
            }
            if inner.is_empty() {
                return Ok(None);
            }
            if let Some(c) = self.script.commands.get_mut(at) {
                c.transparent = spec.transparent;
            }
            let mut inner_frame = frame.via(format!("`{name}`"));
            let mut inner = inner.to_vec();
            if name == "xargs" {
                // Its input becomes arguments: appended, or in place of
                // the replace string.
                match xargs_replace(args) {
                    Some(replace) => {
                        for w in &mut inner {
                            if w.literal().is_some_and(|t| t.contains(&replace)) {
                                *w = Word {
                                    raw: w.raw.clone(),
                                    parts: vec![Part::Dynamic(w.raw.clone())],
                                    subst: w.subst.clone(),
                                };
                            }
                        }
                    }
                    // The input is appended; `…` stands for it.
                    None => inner.push(Word {
                        raw: "…".to_string(),
                        parts: vec![Part::Dynamic("…".to_string())],
                        subst: 0..0,
                    }),
                }
                inner_frame.unknown_args = Some("come from the input of `xargs`".to_string());
            }
            return self.run(inner, stdin, &inner_frame);
        }

        match name.as_str() {
            "eval" => {
                if !args.is_empty() {
                    self.code_words(at, args, "`eval` code", frame)?;
                }
                Ok(None)
            }
            "find" => {
                let mut i = 0;
                while i < args.len() {
                    let t = args[i].literal().unwrap_or_default();
                    if matches!(t.as_str(), "-exec" | "-execdir" | "-ok" | "-okdir") {
                        let end = args[i + 1..]
                            .iter()
                            .position(|w| matches!(w.literal().as_deref(), Some(";" | "+")))
                            .map_or(args.len(), |p| i + 1 + p);
                        let inner = args[i + 1..end].to_vec();
                        self.run(inner, &Stdin::Inherited, &frame.via(format!("`find {t}`")))?;
                        i = end;
                    }
                    i += 1;
                }
                Ok(None)
            }
            "git" => {
                self.git_config(at, args, frame)?;
                Ok(None)
            }
            "export" | "declare" | "typeset" | "local" | "readonly" | "read" | "mapfile"
            | "readarray" | "getopts" | "unset" | "printf" => {
                // They may set variables: forget what was assumed of them.
                for w in args {
                    let text = w.text();
                    self.vars.remove(text.split('=').next().unwrap_or_default());
                }
                if !matches!(
                    name.as_str(),
                    "read" | "mapfile" | "readarray" | "getopts" | "unset" | "printf"
                ) {
                    self.code_var_args(args, frame)?;
                }
                Ok(None)
            }
            "su" | "runuser" | "script" => {
                let attached = args.iter().find_map(|w| {
                    w.literal()
                        .and_then(|t| t.strip_prefix("--command=").map(Word::literal_word))
                });
                let code = attached.or_else(|| {
                    args.iter()
                        .position(|w| {
                            w.literal().is_some_and(|t| {
                                t == "--command"
                                    || (t.starts_with('-')
                                        && !t.starts_with("--")
                                        && t.ends_with('c'))
                            })
                        })
                        .and_then(|pos| args.get(pos + 1).cloned())
                });
                if let Some(code) = code {
                    self.code_words(
                        at,
                        std::slice::from_ref(&code),
                        &format!("`{name} -c` code"),
                        frame,
                    )?;
                    // A change of user is a step of its own for allow
                    // rules; `script` only records a terminal.
                    if let Some(c) = self.script.commands.get_mut(at) {
                        c.transparent = name == "script" && c.dynamic_code.is_none();
                    }
                }
                Ok(None)
            }
            "parallel" => {
                self.parallel(at, args, frame)?;
                Ok(None)
            }
            "ssh" => {
                // `ssh [options] HOST [command…]`: the words after the host
                // are joined into one command line for the remote shell.
                let rest = skip_options(args, "BbcDEeFIiJLlmOoPpQRSWw", &[]);
                if let Some((host, command)) = rest.split_first()
                    && !command.is_empty()
                {
                    let host = host.text();
                    let remote = Frame {
                        remote: Some(host.clone()),
                        ..frame.clone()
                    };
                    self.code_words(
                        at,
                        command,
                        &format!("`ssh {host}` remote command"),
                        &remote,
                    )?;
                    // Reaching another host is a step of its own for allow
                    // rules.
                    if let Some(c) = self.script.commands.get_mut(at) {
                        c.transparent = false;
                    }
                }
                Ok(None)
            }
            "flock" => {
                self.flock(at, args, stdin, frame)?;
                Ok(None)
            }
            "watch" => {
                let rest = skip_options(args, "n", &["--interval"]);
                if !rest.is_empty() {
                    self.code_words(at, rest, "`watch` command", frame)?;
                }
                Ok(None)
            }
            "source" | "." => {
                if args.first().is_some_and(is_stdin_path) {
                    self.fed_by(stdin, Some(at), &name, frame)?;
                    return Ok(Some(true));
                }
                if let Some(script) = args.first()
                    && matches!(script.parts.as_slice(), [Part::Dynamic(_)])
                {
                    self.mark_feeds(script.subst.clone());
                }
                Ok(None)
            }
            n if is_shell(n) => self.shell(at, &name, args, stdin, frame),
            n => {
                if let Some(lang) = inline_code::language(n) {
                    self.inline_code(at, n, lang, args, frame)?;
                }
                let reads = interpreter_reads_stdin(n, args);
                if reads {
                    self.fed_by(stdin, None, &name, frame)?;
                }
                Ok(reads.then_some(false))
            }
        }
    }

    /// `parallel [options] command ::: values…`: the command runs through
    /// a shell once per value, in place of `{}` (or appended); without
    /// values they come from stdin, so they are unknown.
    fn parallel(&mut self, at: usize, args: &[Word], frame: &Frame) -> Result<(), ParseError> {
        let rest = skip_options(args, "jPSIadnNLsEx", PARALLEL_LONG_WITH_VALUE);
        let sep = rest
            .iter()
            .position(|w| w.literal().is_some_and(|t| t.starts_with(":::")));
        let (command, data) = match sep {
            Some(p) => (&rest[..p], &rest[p..]),
            None => (rest, &[][..]),
        };
        if command.is_empty() {
            return Ok(());
        }
        for w in command {
            self.mark_feeds(w.subst.clone());
        }
        let dynamic = command.iter().find_map(|w| w.first_runtime());
        if let Some(c) = self.script.commands.get_mut(at) {
            c.transparent = dynamic.is_none();
            c.dynamic_code = dynamic;
        }
        let text = command
            .iter()
            .map(|w| w.code_text())
            .collect::<Vec<_>>()
            .join(" ");
        // Each value as shell text that means what the shell passed on.
        let values: Option<Vec<String>> = data
            .iter()
            .filter(|w| !w.literal().is_some_and(|t| t.starts_with(":::")))
            .map(|w| {
                w.parts
                    .iter()
                    .map(|p| match p {
                        Part::Home => Some("\"$HOME\"".to_string()),
                        Part::Lit(s) => Some(shell_quote(s)),
                        _ => None,
                    })
                    .collect::<Option<String>>()
            })
            .collect();
        let fill = |value: &str| {
            fill_placeholders(&text, value).unwrap_or_else(|| format!("{text} {value}"))
        };
        let via = "`parallel` command";
        match values {
            Some(values) if !values.is_empty() && values.len() <= MAX_BRACE_WORDS => {
                for v in values {
                    self.code(&fill(&v), via, frame)?;
                }
                Ok(())
            }
            _ => {
                let unknown = Frame {
                    unknown_args: Some("come from the input of `parallel`".to_string()),
                    ..frame.clone()
                };
                self.code(&fill("\"$PARALLEL_ARG\""), via, &unknown)
            }
        }
    }

    /// `flock [options] FILE command…` or `flock [options] FILE -c LINE`.
    fn flock(
        &mut self,
        at: usize,
        args: &[Word],
        stdin: &Stdin,
        frame: &Frame,
    ) -> Result<(), ParseError> {
        let rest = skip_options(args, "wE", &["--wait", "--timeout", "--conflict-exit-code"]);
        let Some((_, after)) = rest.split_first() else {
            return Ok(());
        };
        match after.first().and_then(Word::literal).as_deref() {
            Some("-c" | "--command") => {
                if let Some(code) = after.get(1) {
                    self.code_words(at, std::slice::from_ref(code), "`flock -c` command", frame)?;
                }
            }
            Some(_) | None if !after.is_empty() => {
                if let Some(c) = self.script.commands.get_mut(at) {
                    c.transparent = true;
                }
                self.run(after.to_vec(), stdin, &frame.via("`flock`"))?;
            }
            _ => {}
        }
        Ok(())
    }

    /// An interpreter's inline program (`python3 -c CODE`): what it
    /// obviously runs, deletes and writes becomes commands and redirects.
    fn inline_code(
        &mut self,
        at: usize,
        name: &str,
        lang: inline_code::Language,
        args: &[Word],
        frame: &Frame,
    ) -> Result<(), ParseError> {
        let display = self
            .script
            .commands
            .get(at)
            .map(SimpleCommand::display)
            .unwrap_or_default();
        for (flag, code) in inline_code_args(lang, args) {
            let via = format!("`{name} {flag}` code");
            let inner = Frame {
                unknown_args: Some(format!("are computed by the {via} at run time")),
                ..frame.via(via.clone())
            };
            for action in inline_code::scan(lang, &code.code_text()) {
                match action {
                    inline_code::Action::Shell(line) => self.code(&line, &via, frame)?,
                    inline_code::Action::Argv(argv) => {
                        let argv = argv.iter().map(arg_word).collect();
                        self.run(argv, &Stdin::Inherited, &inner)?;
                    }
                    inline_code::Action::Delete { recursive, target } => {
                        let mut argv = vec![Word::literal_word("rm")];
                        if recursive {
                            argv.push(Word::literal_word("-r"));
                        }
                        argv.push(arg_word(&target));
                        self.run(argv, &Stdin::Inherited, &inner)?;
                    }
                    inline_code::Action::Write(target) => self.script.redirects.push(Redirect {
                        fd: None,
                        write: true,
                        target: arg_word(&target),
                        command: display.clone(),
                    }),
                    inline_code::Action::Dynamic(call) => {
                        if let Some(c) = self.script.commands.get_mut(at) {
                            c.dynamic_code = Some(call);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// `bash …`: `-c` code, a script file, or code on stdin.
    fn shell(
        &mut self,
        at: usize,
        name: &str,
        args: &[Word],
        stdin: &Stdin,
        frame: &Frame,
    ) -> Result<Option<bool>, ParseError> {
        let mut i = 0;
        let mut inline = false;
        let mut from_stdin = false;
        while let Some(t) = args.get(i).and_then(|w| w.literal()) {
            if t == "--" || t == "-" {
                i += 1;
                break;
            }
            if let Some(long) = t.strip_prefix("--") {
                i += if matches!(long, "rcfile" | "init-file") {
                    2
                } else {
                    1
                };
                continue;
            }
            if t.len() > 1 && (t.starts_with('-') || t.starts_with('+')) {
                let flags = &t[1..];
                inline |= t.starts_with('-') && flags.contains('c');
                from_stdin |= flags.contains('s');
                i += if flags.contains('o') || flags.contains('O') {
                    2
                } else {
                    1
                };
                continue;
            }
            break;
        }
        let positional = args.get(i..).unwrap_or(&[]);
        if inline {
            if let Some(code) = positional.first() {
                let via = format!("`{name} -c` code");
                self.code_words(at, std::slice::from_ref(code), &via, frame)?;
            }
            return Ok(None);
        }
        if positional.is_empty() || from_stdin || positional.first().is_some_and(is_stdin_path) {
            self.fed_by(stdin, Some(at), name, frame)?;
            return Ok(Some(true));
        }
        // `bash <(curl …)`: the script comes from a process substitution.
        if let Some(script) = positional.first()
            && matches!(script.parts.as_slice(), [Part::Dynamic(_)])
        {
            self.mark_feeds(script.subst.clone());
        }
        Ok(None)
    }

    /// The interpreter `name` reads code from `stdin`: look at that code.
    /// Shell code (`at` is the shell's record) is parsed; for other
    /// interpreters only what computes it is marked.
    fn fed_by(
        &mut self,
        stdin: &Stdin,
        at: Option<usize>,
        name: &str,
        frame: &Frame,
    ) -> Result<(), ParseError> {
        match stdin {
            Stdin::Inherited => Ok(()),
            Stdin::ProcessSubstitution(range) => {
                self.mark_feeds(range.clone());
                Ok(())
            }
            Stdin::Heredoc(w) | Stdin::HereString(w) => match at {
                Some(at) => {
                    let kind = if matches!(stdin, Stdin::Heredoc(_)) {
                        "heredoc"
                    } else {
                        "here-string"
                    };
                    self.code_words(
                        at,
                        std::slice::from_ref(w),
                        &format!("{kind} fed to `{name}`"),
                        frame,
                    )
                }
                None => {
                    self.mark_feeds(w.subst.clone());
                    Ok(())
                }
            },
        }
    }
}

/// Every word a brace expression expands to, or `None` past
/// [`MAX_BRACE_WORDS`].
fn brace_alternatives(pieces: &[BraceExpressionOrText]) -> Option<Vec<String>> {
    let mut out = vec![String::new()];
    for piece in pieces {
        let options: Vec<String> = match piece {
            BraceExpressionOrText::Text(t) => vec![t.clone()],
            BraceExpressionOrText::Expr(members) => {
                let mut all = Vec::new();
                for m in members {
                    all.extend(brace_member(m)?);
                    if all.len() > MAX_BRACE_WORDS {
                        return None;
                    }
                }
                all
            }
        };
        if out.len().saturating_mul(options.len()) > MAX_BRACE_WORDS {
            return None;
        }
        out = out
            .iter()
            .flat_map(|prefix| options.iter().map(move |o| format!("{prefix}{o}")))
            .collect();
    }
    Some(out)
}

fn brace_member(m: &BraceExpressionMember) -> Option<Vec<String>> {
    let steps = |start: i64, end: i64, increment: i64| -> Option<Vec<i64>> {
        let step = increment.checked_abs().filter(|s| *s > 0).unwrap_or(1);
        let count = start.abs_diff(end) / step.unsigned_abs() + 1;
        if count > MAX_BRACE_WORDS as u64 {
            return None;
        }
        let dir = if end >= start { step } else { -step };
        Some((0..count as i64).map(|i| start + i * dir).collect())
    };
    match m {
        BraceExpressionMember::Child(pieces) => brace_alternatives(pieces),
        BraceExpressionMember::NumberSequence {
            start,
            end,
            increment,
        } => Some(
            steps(*start, *end, *increment)?
                .iter()
                .map(i64::to_string)
                .collect(),
        ),
        BraceExpressionMember::CharSequence {
            start,
            end,
            increment,
        } => Some(
            steps(
                i64::from(u32::from(*start)),
                i64::from(u32::from(*end)),
                *increment,
            )?
            .iter()
            .filter_map(|c| u32::try_from(*c).ok().and_then(char::from_u32))
            .map(String::from)
            .collect(),
        ),
    }
}

/// A compound command's text on one line, for messages.
fn one_line(node: &impl std::fmt::Display) -> String {
    node.to_string()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

fn syntax(context: &str, e: impl std::fmt::Display) -> ParseError {
    ParseError::Syntax {
        context: context.to_string(),
        message: e.to_string(),
    }
}

/// Rejects input nested deeper than the parser's stack can take. Counts
/// every bracket, quoted or not: over-counting only refuses absurd input.
fn check_brackets(src: &str, context: &str) -> Result<(), ParseError> {
    let mut depth: usize = 0;
    for b in src.bytes() {
        match b {
            b'(' | b'{' | b'[' => {
                depth += 1;
                if depth > MAX_BRACKET_DEPTH {
                    return Err(ParseError::TooDeep {
                        context: context.to_string(),
                        max: MAX_BRACKET_DEPTH,
                    });
                }
            }
            b')' | b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

fn merge_literals(parts: Vec<Part>) -> Vec<Part> {
    let mut out: Vec<Part> = Vec::with_capacity(parts.len());
    for p in parts {
        match (out.last_mut(), p) {
            (Some(Part::Lit(prev)), Part::Lit(s)) => prev.push_str(&s),
            (_, p) => out.push(p),
        }
    }
    if out.is_empty() {
        out.push(Part::Lit(String::new()));
    }
    out
}

/// `$HOME`, `$X`, `${X:?}`, `${X:-default}` as parts; `None` for the rest.
fn parameter_part(expr: &ParameterExpr) -> Option<Part> {
    let named = |p: &Parameter| match p {
        Parameter::Named(n) => Some(n.clone()),
        _ => None,
    };
    match expr {
        ParameterExpr::Parameter {
            parameter,
            indirect: false,
        } => {
            let name = named(parameter)?;
            Some(if name == "HOME" {
                Part::Home
            } else {
                Part::Var {
                    name,
                    guarded: false,
                }
            })
        }
        ParameterExpr::IndicateErrorIfNullOrUnset {
            parameter,
            indirect: false,
            test_type: ParameterTestType::UnsetOrNull,
            ..
        } => Some(Part::Var {
            name: named(parameter)?,
            guarded: true,
        }),
        ParameterExpr::UseDefaultValues {
            parameter,
            indirect: false,
            test_type: ParameterTestType::UnsetOrNull,
            default_value: Some(d),
        }
        | ParameterExpr::AssignDefaultValues {
            parameter,
            indirect: false,
            test_type: ParameterTestType::UnsetOrNull,
            default_value: Some(d),
        } if !d.is_empty() => Some(Part::Var {
            name: named(parameter)?,
            guarded: true,
        }),
        _ => None,
    }
}

/// Strings inside a parameter expansion that are themselves expanded (and
/// may hold command substitutions): defaults, patterns, indices, offsets.
fn expr_strings(expr: &ParameterExpr) -> Vec<&str> {
    use ParameterExpr as P;
    let mut out: Vec<&str> = Vec::new();
    let parameter = match expr {
        P::Parameter { parameter, .. }
        | P::ParameterLength { parameter, .. }
        | P::Transform { parameter, .. } => Some(parameter),
        P::UseDefaultValues {
            parameter,
            default_value: s,
            ..
        }
        | P::AssignDefaultValues {
            parameter,
            default_value: s,
            ..
        }
        | P::IndicateErrorIfNullOrUnset {
            parameter,
            error_message: s,
            ..
        }
        | P::UseAlternativeValue {
            parameter,
            alternative_value: s,
            ..
        }
        | P::RemoveSmallestSuffixPattern {
            parameter,
            pattern: s,
            ..
        }
        | P::RemoveLargestSuffixPattern {
            parameter,
            pattern: s,
            ..
        }
        | P::RemoveSmallestPrefixPattern {
            parameter,
            pattern: s,
            ..
        }
        | P::RemoveLargestPrefixPattern {
            parameter,
            pattern: s,
            ..
        }
        | P::UppercaseFirstChar {
            parameter,
            pattern: s,
            ..
        }
        | P::UppercasePattern {
            parameter,
            pattern: s,
            ..
        }
        | P::LowercaseFirstChar {
            parameter,
            pattern: s,
            ..
        }
        | P::LowercasePattern {
            parameter,
            pattern: s,
            ..
        } => {
            out.extend(s.as_deref());
            Some(parameter)
        }
        P::Substring {
            parameter,
            offset,
            length,
            ..
        } => {
            out.push(&offset.value);
            out.extend(length.as_ref().map(|l| l.value.as_str()));
            Some(parameter)
        }
        P::ReplaceSubstring {
            parameter,
            pattern,
            replacement,
            ..
        } => {
            out.push(pattern);
            out.extend(replacement.as_deref());
            Some(parameter)
        }
        P::VariableNames { .. } | P::MemberKeys { .. } => None,
    };
    if let Some(Parameter::NamedWithIndex { index, .. }) = parameter {
        out.push(index);
    }
    out
}

/// A backslash escape outside single quotes. Inside double quotes only
/// `$ \` " \\` and newline lose their backslash.
fn unescape(s: &str, quoted: bool) -> String {
    let rest = s.strip_prefix('\\').unwrap_or(s);
    if rest == "\n" {
        return String::new();
    }
    if quoted && !matches!(rest, "$" | "`" | "\"" | "\\") {
        return s.to_string();
    }
    rest.to_string()
}

/// Inside backquotes, `\$`, `` \` `` and `\\` stand for the bare character.
fn unescape_backquoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\'
            && let Some(&n) = chars.peek()
            && matches!(n, '$' | '`' | '\\')
        {
            out.push(n);
            chars.next();
            continue;
        }
        out.push(c);
    }
    out
}

/// Decodes the body of `$'...'` (ANSI-C quoting), so `$'\x72m'` reads `rm`.
fn ansi_c(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    let take_digits =
        |chars: &mut std::iter::Peekable<std::str::Chars<'_>>, radix: u32, max: usize| {
            let mut value: u32 = 0;
            let mut n = 0;
            while n < max {
                match chars.peek().and_then(|c| c.to_digit(radix)) {
                    Some(d) => {
                        value = value.saturating_mul(radix).saturating_add(d);
                        chars.next();
                        n += 1;
                    }
                    None => break,
                }
            }
            (n > 0).then_some(value)
        };
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(e) = chars.next() else {
            out.push('\\');
            break;
        };
        let decoded = match e {
            'a' => Some('\x07'),
            'b' => Some('\x08'),
            'e' | 'E' => Some('\x1b'),
            'f' => Some('\x0c'),
            'n' => Some('\n'),
            'r' => Some('\r'),
            't' => Some('\t'),
            'v' => Some('\x0b'),
            '\\' | '\'' | '"' | '?' => Some(e),
            'x' => take_digits(&mut chars, 16, 2).and_then(char::from_u32),
            'u' => take_digits(&mut chars, 16, 4).and_then(char::from_u32),
            'U' => take_digits(&mut chars, 16, 8).and_then(char::from_u32),
            'c' => chars
                .next()
                .and_then(|c| char::from_u32(u32::from(c) & 0x1f)),
            '0'..='7' => {
                let mut value = e.to_digit(8).unwrap_or(0);
                for _ in 0..2 {
                    match chars.peek().and_then(|c| c.to_digit(8)) {
                        Some(d) => {
                            value = value * 8 + d;
                            chars.next();
                        }
                        None => break,
                    }
                }
                char::from_u32(value)
            }
            _ => None,
        };
        match decoded {
            Some(d) => out.push(d),
            None => {
                out.push('\\');
                out.push(e);
            }
        }
    }
    out
}

/// What `echo` / `printf` would print, when it is known now.
fn printed_text(argv: &[Word]) -> Option<String> {
    let name = argv.first()?.literal()?;
    let args = &argv[1..];
    match basename(&name) {
        "echo" => {
            let words: Vec<String> = args
                .iter()
                .skip_while(|w| {
                    matches!(
                        w.literal().as_deref(),
                        Some("-n" | "-e" | "-E" | "-ne" | "-en")
                    )
                })
                .map(|w| w.literal())
                .collect::<Option<_>>()?;
            Some(words.join(" "))
        }
        "printf" => {
            let format = args.first()?.literal()?;
            (args.len() == 1 && !format.contains('%')).then(|| format.replace("\\n", "\n"))
        }
        _ => None,
    }
}

/// `bash /dev/stdin`, `. /dev/stdin`: the script is standard input.
fn is_stdin_path(w: &Word) -> bool {
    matches!(
        w.literal().as_deref(),
        Some("/dev/stdin" | "/dev/fd/0" | "/proc/self/fd/0")
    )
}

fn is_shell(name: &str) -> bool {
    matches!(
        name,
        "sh" | "bash" | "dash" | "zsh" | "ksh" | "mksh" | "ash" | "yash" | "posh" | "rbash"
    )
}

/// Whether an interpreter other than a shell reads its program from stdin
/// (`python3`, `perl -`, `node` with no script).
fn interpreter_reads_stdin(name: &str, args: &[Word]) -> bool {
    let inline: &[&str] = if name.starts_with("python") || name == "pypy" || name == "pypy3" {
        &["-c", "-m"]
    } else if matches!(name, "perl" | "ruby") {
        &["-e", "-E"]
    } else if matches!(name, "node" | "nodejs") {
        &["-e", "--eval", "-p", "--print"]
    } else {
        return false;
    };
    for w in args {
        let Some(t) = w.literal() else {
            return false;
        };
        if t == "-" {
            return true;
        }
        if inline
            .iter()
            .any(|f| t == *f || (f.len() == 2 && t.starts_with(f)))
        {
            return false;
        }
        // perl -ne / ruby -pe: an inline program in a flag cluster.
        if matches!(name, "perl" | "ruby")
            && t.starts_with('-')
            && !t.starts_with("--")
            && t.contains('e')
        {
            return false;
        }
        if !t.starts_with('-') {
            return false;
        }
    }
    true
}

/// GNU parallel's long options that take a value.
const PARALLEL_LONG_WITH_VALUE: &[&str] = &[
    "--jobs",
    "--sshlogin",
    "--sshloginfile",
    "--results",
    "--joblog",
    "--arg-file",
    "--delay",
    "--timeout",
    "--colsep",
    "--delimiter",
    "--tmpdir",
    "--workdir",
    "--env",
    "--halt",
    "--retries",
    "--memfree",
    "--load",
    "--max-args",
    "--max-replace-args",
    "--basefile",
    "--return",
    "--transferfile",
    "--tagstring",
    "--replace",
];

/// `text` with GNU parallel's placeholders (`{}`, `{.}`, `{/}`, `{//}`,
/// `{/.}`, `{#}`, `{%}`, `{1}`) replaced by `value`; `None` if it has none.
fn fill_placeholders(text: &str, value: &str) -> Option<String> {
    let mut out = String::new();
    let mut rest = text;
    let mut found = false;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let digits = after.len() - after.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        let tail = &after[digits..];
        let modifier = ["/.", "//", ".", "/", "#", "%", ""]
            .into_iter()
            .find(|m| tail.starts_with(m) && tail[m.len()..].starts_with('}'));
        match modifier {
            Some(m) => {
                out.push_str(value);
                rest = &tail[m.len() + 1..];
                found = true;
            }
            None => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    found.then_some(out)
}

/// The replace string of `xargs -I R` / `-iR` / `--replace[=R]`, if any.
fn xargs_replace(args: &[Word]) -> Option<String> {
    let mut i = 0;
    while let Some(t) = args.get(i).and_then(Word::literal) {
        if !t.starts_with('-') || t == "--" {
            break;
        }
        if t == "-I" {
            return args.get(i + 1).and_then(Word::literal);
        }
        if let Some(r) = t
            .strip_prefix("-I")
            .or_else(|| t.strip_prefix("--replace="))
        {
            return Some(r.to_string());
        }
        if t == "-i" || t == "--replace" {
            return Some("{}".to_string());
        }
        if let Some(r) = t.strip_prefix("-i") {
            return Some(r.to_string());
        }
        i += 1;
    }
    None
}

/// The inline programs among an interpreter's arguments, each with the
/// flag that gave it (`-c`, `-e`, `--eval`, `-r`).
fn inline_code_args(lang: inline_code::Language, args: &[Word]) -> Vec<(String, Word)> {
    use inline_code::Language as L;
    let (short, long): (&[char], &[&str]) = match lang {
        L::Python => (&['c'], &[]),
        L::Perl => (&['e', 'E'], &[]),
        L::Ruby => (&['e'], &[]),
        L::Node => (&['e', 'p'], &["--eval", "--print"]),
        L::Php => (&['r'], &[]),
    };
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(t) = args.get(i).and_then(Word::literal) {
        if t == "--" || !t.starts_with('-') || t == "-" {
            break;
        }
        if let Some((flag, value)) = t.split_once('=')
            && long.contains(&flag)
        {
            out.push((flag.to_string(), Word::literal_word(value)));
            i += 1;
            continue;
        }
        if long.contains(&t.as_str()) {
            if let Some(code) = args.get(i + 1) {
                out.push((t.clone(), code.clone()));
            }
            i += 2;
            continue;
        }
        if t.starts_with("--") {
            i += 1;
            continue;
        }
        // A cluster such as `-ne CODE`, `-Bc CODE` or `-eCODE`.
        let cluster = &t[1..];
        match cluster.char_indices().find(|(_, c)| short.contains(c)) {
            Some((pos, c)) => {
                let attached = &cluster[pos + c.len_utf8()..];
                if attached.is_empty() {
                    if let Some(code) = args.get(i + 1) {
                        out.push((format!("-{c}"), code.clone()));
                    }
                    i += 2;
                } else {
                    out.push((format!("-{c}"), Word::literal_word(attached)));
                    i += 1;
                }
                // Python's `-c` ends its options; the rest is sys.argv.
                if lang == L::Python {
                    break;
                }
            }
            None => {
                // Options with a separate value.
                let takes_value = match lang {
                    L::Python => matches!(cluster, "W" | "X"),
                    L::Node => matches!(cluster, "r"),
                    _ => false,
                };
                i += if takes_value { 2 } else { 1 };
            }
        }
    }
    out
}

/// A word for an argument of inline code: `~` and `$NAME` at the start
/// keep their meaning (the worst case), computed ones stay unknown.
fn arg_word(arg: &inline_code::Arg) -> Word {
    let parts = match arg {
        inline_code::Arg::Home => vec![Part::Home],
        inline_code::Arg::Computed(raw) => vec![Part::Dynamic(raw.clone())],
        inline_code::Arg::Lit(text) => {
            let rest_of = |skip: usize| text.get(skip..).unwrap_or_default().to_string();
            let var = text
                .strip_prefix("${")
                .and_then(|r| r.split_once('}'))
                .map(|(name, _)| (name.to_string(), name.len() + 3))
                .or_else(|| {
                    let name: String = text
                        .strip_prefix('$')?
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    (!name.is_empty()).then(|| (name.clone(), name.len() + 1))
                });
            let mut parts = match var {
                _ if text == "~" || text.starts_with("~/") => {
                    vec![Part::Home, Part::Lit(rest_of(1))]
                }
                Some((name, len)) if name == "HOME" => vec![Part::Home, Part::Lit(rest_of(len))],
                Some((name, len)) => vec![
                    Part::Var {
                        name,
                        guarded: false,
                    },
                    Part::Lit(rest_of(len)),
                ],
                None => vec![Part::Lit(text.clone())],
            };
            parts.retain(|p| !matches!(p, Part::Lit(s) if s.is_empty()));
            parts
        }
    };
    let raw = match arg {
        inline_code::Arg::Home => "~".to_string(),
        inline_code::Arg::Computed(raw) | inline_code::Arg::Lit(raw) => raw.clone(),
    };
    Word {
        raw,
        parts,
        subst: 0..0,
    }
}

/// `'…'` quoting for text put into a command line.
/// Most values of a `for` loop whose body is walked once per value.
pub const MAX_LOOP_VALUES: usize = 16;

/// A value a later `$NAME` repeats unchanged: no globs, `~` or spaces.
fn plain_value(v: &str) -> bool {
    !v.is_empty() && !v.contains(|c: char| c.is_whitespace() || "*?[~".contains(c))
}

/// Environment variables whose value a program runs as a command line.
const CODE_VARS: [&str; 17] = [
    "GIT_PAGER",
    "PAGER",
    "MANPAGER",
    "SYSTEMD_PAGER",
    "GIT_EDITOR",
    "GIT_SEQUENCE_EDITOR",
    "EDITOR",
    "VISUAL",
    "SUDO_EDITOR",
    "SYSTEMD_EDITOR",
    "FCEDIT",
    "GIT_SSH_COMMAND",
    "GIT_SSH",
    "GIT_EXTERNAL_DIFF",
    "GIT_ASKPASS",
    "SSH_ASKPASS",
    "GIT_PROXY_COMMAND",
];

/// The command line git runs for configuration `key` set to `value`, if
/// it runs one: pagers, editors, ssh and diff/merge/filter drivers run
/// through the shell; a `!` alias is shell code, another alias a git
/// command; a `!` credential helper is shell code.
fn git_command_value(key: &str, value: &str) -> Option<String> {
    let key = key.to_ascii_lowercase();
    let parts: Vec<&str> = key.split('.').collect();
    let (Some(section), Some(last)) = (parts.first().copied(), parts.last().copied()) else {
        return None;
    };
    let boolean = matches!(
        value.to_ascii_lowercase().as_str(),
        "" | "true" | "false" | "yes" | "no" | "on" | "off" | "1" | "0"
    );
    if section == "alias" && parts.len() >= 2 {
        return Some(match value.strip_prefix('!') {
            Some(code) => code.to_string(),
            None => format!("git {value}"),
        });
    }
    if section == "credential" && last == "helper" {
        return match value.strip_prefix('!') {
            Some(code) => Some(code.to_string()),
            None if value.contains(['/', ' ']) => Some(value.to_string()),
            None => None,
        };
    }
    let runs = match (section, parts.len(), last) {
        ("core", 2, "pager" | "editor" | "sshcommand" | "askpass" | "gitproxy")
        | ("core", 2, "fsmonitor")
        | ("sequence", 2, "editor")
        | ("diff", 2, "external")
        | ("gpg", _, "program")
        | ("uploadpack", 2, "packobjectshook")
        | ("interactive", 2, "difffilter")
        | ("sendemail", 2, "sendmailcmd" | "tocmd" | "cccmd")
        | ("pager", 2, _)
        | ("diff", 3, "textconv" | "command")
        | ("merge", 3, "driver")
        | ("filter", 3, "clean" | "smudge" | "process")
        | ("mergetool" | "difftool" | "browser" | "man", 3, "cmd")
        | ("remote", 3, "uploadpack" | "receivepack") => !boolean,
        _ => false,
    };
    runs.then(|| value.to_string())
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// How a wrapper command is read: which options take a value, and how many
/// positional words come before the wrapped command.
struct Wrapper {
    short_with_value: &'static str,
    long_with_value: &'static [&'static str],
    assignments: bool,
    /// `env -S 'cmd args'`: the value is a command line of its own.
    split_string: bool,
    positionals: usize,
    /// Not a change of privilege: allow rules need only cover the inner
    /// command.
    transparent: bool,
}

fn wrapper(name: &str) -> Option<Wrapper> {
    let w = |short: &'static str, long: &'static [&'static str], positionals: usize| Wrapper {
        short_with_value: short,
        long_with_value: long,
        assignments: false,
        split_string: false,
        positionals,
        transparent: true,
    };
    Some(match name {
        "env" => Wrapper {
            assignments: true,
            split_string: true,
            ..w("uCS", &["--unset", "--chdir", "--split-string"], 0)
        },
        "sudo" => Wrapper {
            assignments: true,
            transparent: false,
            ..w(
                "ugCDhprtTUc",
                &[
                    "--user",
                    "--group",
                    "--close-from",
                    "--chdir",
                    "--host",
                    "--prompt",
                    "--role",
                    "--type",
                    "--command-timeout",
                    "--other-user",
                    "--login-class",
                ],
                0,
            )
        },
        "doas" => Wrapper {
            transparent: false,
            ..w("uC", &[], 0)
        },
        "nohup" | "setsid" | "builtin" | "command" | "busybox" | "chronic" | "unbuffer" => {
            w("", &[], 0)
        }
        "exec" => w("a", &[], 0),
        // `chroot [--userspec=U:G] NEWROOT [command…]`: a change of root,
        // so allow rules must cover it.
        "chroot" => Wrapper {
            transparent: false,
            ..w("", &["--userspec", "--groups"], 1)
        },
        "time" => w("fo", &["--format", "--output"], 0),
        "nice" => w("n", &["--adjustment"], 0),
        "ionice" => w(
            "cnpPu",
            &["--class", "--classdata", "--pid", "--pgid", "--uid"],
            0,
        ),
        "stdbuf" => w("ioe", &["--input", "--output", "--error"], 0),
        "timeout" => w("sk", &["--signal", "--kill-after"], 1),
        // Tracers, schedulers and environment setters that run the rest
        // of their arguments as a command.
        "strace" => w(
            "abeEIoOpPsSuUX",
            &[
                "--output", "--signal", "--trace", "--attach", "--user", "--env",
            ],
            0,
        ),
        "ltrace" => w("aAbDeEfFlnopsuwX", &["--output", "--library"], 0),
        "unshare" => w("SGRw", &["--setuid", "--setgid", "--root", "--wd"], 0),
        "fakeroot" => w("lsi", &["--lib", "--faked"], 0),
        "chrt" | "taskset" | "faketime" => w("TPD", &[], 1),
        "prlimit" => w("p", &["--pid"], 0),
        "numactl" => w(
            "CNmpi",
            &[
                "--physcpubind",
                "--cpunodebind",
                "--membind",
                "--preferred",
                "--interleave",
            ],
            0,
        ),
        "xvfb-run" => w(
            "efnpsw",
            &[
                "--error-file",
                "--auth-file",
                "--server-num",
                "--xauth-protocol",
                "--server-args",
                "--wait",
            ],
            0,
        ),
        "dbus-run-session" => w("", &["--config-file", "--dbus-daemon"], 0),
        "systemd-inhibit" => w("", &["--what", "--who", "--why", "--mode"], 0),
        "setpriv" => w(
            "",
            &[
                "--reuid",
                "--regid",
                "--ruid",
                "--euid",
                "--rgid",
                "--egid",
                "--groups",
                "--inh-caps",
                "--ambient-caps",
                "--bounding-set",
                "--securebits",
                "--pdeathsig",
            ],
            0,
        ),
        "valgrind" | "catchsegv" | "firejail" | "entr" => w("", &[], 0),
        "proxychains" | "proxychains4" => w("f", &[], 0),
        "xargs" => w(
            "adEILnPs",
            &[
                "--arg-file",
                "--delimiter",
                "--eof",
                "--replace",
                "--max-lines",
                "--max-args",
                "--max-procs",
                "--max-chars",
                "--process-slot-var",
            ],
            0,
        ),
        _ => return None,
    })
}

/// Whether `name` runs the rest of its arguments as a command (`sudo`,
/// `env`, `timeout`, `strace`, …).
pub fn is_wrapper(name: &str) -> bool {
    wrapper(name).is_some() || matches!(name, "flock" | "watch" | "parallel")
}

/// The wrapped command of a wrapper's arguments; or, for `env -S`, the
/// string to split as a command line.
fn wrapped_command<'a>(spec: &Wrapper, args: &'a [Word]) -> (&'a [Word], Option<Word>) {
    let mut i = 0;
    while let Some(t) = args.get(i).and_then(|w| w.literal()) {
        if t == "--" {
            i += 1;
            break;
        }
        if spec.assignments && is_assignment(&t) {
            i += 1;
            continue;
        }
        if t.starts_with("--") {
            let takes = !t.contains('=') && spec.long_with_value.contains(&t.as_str());
            if spec.split_string && (t == "--split-string" || t.starts_with("--split-string=")) {
                let value = t
                    .strip_prefix("--split-string=")
                    .map(Word::literal_word)
                    .or_else(|| args.get(i + 1).cloned());
                return (&[], value);
            }
            i += if takes { 2 } else { 1 };
            continue;
        }
        if t.len() > 1 && t.starts_with('-') {
            let cluster = &t[1..];
            let mut skip = 1;
            for (pos, ch) in cluster.char_indices() {
                if spec.short_with_value.contains(ch) {
                    if ch == 'S' && spec.split_string {
                        let value = if pos + 1 < cluster.len() {
                            Some(Word::literal_word(&cluster[pos + 1..]))
                        } else {
                            args.get(i + 1).cloned()
                        };
                        return (&[], value);
                    }
                    if pos + ch.len_utf8() == cluster.len() {
                        skip = 2;
                    }
                    break;
                }
            }
            i += skip;
            continue;
        }
        break;
    }
    let start = (i + spec.positionals).min(args.len());
    (&args[start..], None)
}

/// Skips leading options (for `watch`).
fn skip_options<'a>(
    args: &'a [Word],
    short_with_value: &str,
    long_with_value: &[&str],
) -> &'a [Word] {
    let mut i = 0;
    while let Some(t) = args.get(i).and_then(|w| w.literal()) {
        if t == "--" {
            i += 1;
            break;
        }
        if t.starts_with("--") {
            i += if !t.contains('=') && long_with_value.contains(&t.as_str()) {
                2
            } else {
                1
            };
            continue;
        }
        if t.len() > 1 && t.starts_with('-') {
            let last = t.chars().last().unwrap_or('-');
            i += if short_with_value.contains(last) {
                2
            } else {
                1
            };
            continue;
        }
        break;
    }
    args.get(i..).unwrap_or(&[])
}

fn is_assignment(t: &str) -> bool {
    match t.split_once('=') {
        Some((name, _)) => {
            !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !name.starts_with(|c: char| c.is_ascii_digit())
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn commands(line: &str) -> Vec<String> {
        parse(line)
            .unwrap_or_else(|e| panic!("{line:?}: {e}"))
            .commands
            .iter()
            .map(|c| c.argv.iter().map(Word::text).collect::<Vec<_>>().join(" "))
            .collect()
    }

    #[test]
    fn collects_every_simple_command() {
        let cases: &[(&str, &[&str])] = &[
            ("ls -la", &["ls -la"]),
            ("git status && cargo test", &["git status", "cargo test"]),
            ("a; b || c & d", &["a", "b", "c", "d"]),
            (
                "echo x | sudo rm -rf /",
                &["echo x", "sudo rm -rf /", "rm -rf /"],
            ),
            ("(cd /tmp && rm -rf x)", &["cd /tmp", "rm -rf x"]),
            ("{ a; b; } > out", &["a", "b"]),
            ("echo $(rm -rf /)", &["rm -rf /", "echo $(rm -rf /)"]),
            (
                "echo \"in $(id -u) quotes\"",
                &["id -u", "echo in $(id -u) quotes"],
            ),
            ("echo `whoami`", &["whoami", "echo `whoami`"]),
            ("echo \"`whoami`\"", &["whoami", "echo `whoami`"]),
            (
                "diff <(ls a) >(cat)",
                &["ls a", "cat", "diff <(ls a) >(cat)"],
            ),
            ("X=$(date) make", &["date", "make"]),
            ("for f in $(ls); do rm $f; done", &["ls", "rm $f"]),
            ("while true; do sleep 1; done", &["true", "sleep 1"]),
            (
                "if test -f x; then cat x; else touch x; fi",
                &["test -f x", "cat x", "touch x"],
            ),
            (
                "case $(uname) in Linux) reboot;; esac",
                &["uname", "reboot"],
            ),
            ("f() { rm -rf /; }; f", &["rm -rf /", "f"]),
            ("[[ $(id -u) == 0 ]]", &["id -u"]),
            ("(( $(nproc) > 2 ))", &["nproc"]),
            ("(( i++ ))", &[]),
            ("( (rm -rf /) )", &["rm -rf /"]),
            ("((rm -rf /) )", &["rm -rf /"]),
            ("( (ls))", &["ls"]),
            ("echo é; ( ( (reboot) ) )", &["echo é", "reboot"]),
            ("echo $( (id) )", &["id", "echo $( (id) )"]),
            ("echo ${x:-$(rm -rf ~)}", &["rm -rf ~", "echo $x"]),
            (
                "echo $(( 1 + $(id -u) ))",
                &["id -u", "echo $(( 1 + $(id -u) ))"],
            ),
            ("bash -c 'rm -rf /'", &["bash -c rm -rf /", "rm -rf /"]),
            (
                "sh -c \"git push -f\"",
                &["sh -c git push -f", "git push -f"],
            ),
            ("bash -lc 'a && b'", &["bash -lc a && b", "a", "b"]),
            (
                "bash -euo pipefail -c 'x'",
                &["bash -euo pipefail -c x", "x"],
            ),
            ("eval 'rm -rf /'", &["eval rm -rf /", "rm -rf /"]),
            ("eval rm -rf /", &["eval rm -rf /", "rm -rf /"]),
            (
                "bash -c \"bash -c 'eval \\\"rm -rf /\\\"'\"",
                &[
                    "bash -c bash -c 'eval \"rm -rf /\"'",
                    "bash -c eval \"rm -rf /\"",
                    "eval rm -rf /",
                    "rm -rf /",
                ],
            ),
            ("bash <<EOF\nrm -rf /\nEOF", &["bash", "rm -rf /"]),
            (
                "sudo -u root bash <<'EOF'\nmkfs.ext4 /dev/sda\nEOF",
                &["sudo -u root bash", "bash", "mkfs.ext4 /dev/sda"],
            ),
            ("bash <<< 'reboot'", &["bash", "reboot"]),
            (". /dev/stdin <<< 'reboot'", &[". /dev/stdin", "reboot"]),
            (
                "echo reboot | bash /dev/stdin",
                &["echo reboot", "bash /dev/stdin", "reboot"],
            ),
            ("cat <<EOF\n$(rm -rf /)\nEOF", &["rm -rf /", "cat"]),
            ("cat <<'EOF'\n$(rm -rf /)\nEOF", &["cat"]),
            ("echo 'rm -rf /' | sh", &["echo rm -rf /", "sh", "rm -rf /"]),
            (
                "find . | xargs rm -rf /",
                &["find .", "xargs rm -rf /", "rm -rf / …"],
            ),
            (
                "xargs -I{} -n 1 rm -rf {}",
                &["xargs -I{} -n 1 rm -rf {}", "rm -rf {}"],
            ),
            (
                "env FOO=1 -u BAR rm -rf ~",
                &["env FOO=1 -u BAR rm -rf ~", "rm -rf ~"],
            ),
            ("env -S 'rm -rf /'", &["env -S rm -rf /", "rm -rf /"]),
            (
                "nohup timeout -s KILL 10 nice -n 5 rm x",
                &[
                    "nohup timeout -s KILL 10 nice -n 5 rm x",
                    "timeout -s KILL 10 nice -n 5 rm x",
                    "nice -n 5 rm x",
                    "rm x",
                ],
            ),
            (
                "command -p exec -a n git push",
                &[
                    "command -p exec -a n git push",
                    "exec -a n git push",
                    "git push",
                ],
            ),
            (
                "find / -name x -exec rm -rf {} \\;",
                &["find / -name x -exec rm -rf {} ;", "rm -rf {}"],
            ),
            ("su -c 'reboot' root", &["su -c reboot root", "reboot"]),
            (
                "watch -n 1 'ls; reboot'",
                &["watch -n 1 ls; reboot", "ls", "reboot"],
            ),
            (
                "busybox sh -c reboot",
                &["busybox sh -c reboot", "sh -c reboot", "reboot"],
            ),
            ("$'\\x72\\x6d' -rf /", &["rm -rf /"]),
            ("r\\m -rf /", &["rm -rf /"]),
            ("\"rm\" -rf '/'", &["rm -rf /"]),
            ("echo hi > /dev/null 2>&1", &["echo hi"]),
            ("x=1", &[]),
            ("time ls", &["ls"]),
            ("{rm,-rf,/}", &["rm -rf /"]),
            ("sudo {reboot,}", &["sudo reboot", "reboot"]),
            (
                "mkdir -p src/{a,b{1..3}}",
                &["mkdir -p src/a src/b1 src/b2 src/b3"],
            ),
            (
                "echo \"{a,b}\" '{c,d}' \\{e,f}",
                &["echo {a,b} {c,d} {e,f}"],
            ),
            ("echo {1..1000}", &["echo {1..1000}"]),
            ("! grep -q x f", &["grep -q x f"]),
            ("coproc cat", &["cat"]),
            ("# only a comment\nls", &["ls"]),
        ];
        for (line, want) in cases {
            assert_eq!(&commands(line), want, "{line:?}");
        }
    }

    #[test]
    fn commands_run_from_data_or_arguments_are_collected() {
        let cases: &[(&str, &[&str])] = &[
            (
                "parallel rm -rf ::: a b",
                &["parallel rm -rf ::: a b", "rm -rf a", "rm -rf b"],
            ),
            (
                "parallel 'gzip {}' ::: x.log",
                &["parallel gzip {} ::: x.log", "gzip x.log"],
            ),
            (
                "ls | parallel rm",
                &["ls", "parallel rm", "rm $PARALLEL_ARG"],
            ),
            ("xargs -I% rm %", &["xargs -I% rm %", "rm %"]),
            (
                "ssh -p 22 h 'ls; reboot'",
                &["ssh -p 22 h ls; reboot", "ls", "reboot"],
            ),
            ("ssh h", &["ssh h"]),
            (
                "flock /l -c 'make all'",
                &["flock /l -c make all", "make all"],
            ),
            ("flock -w 3 /l make", &["flock -w 3 /l make", "make"]),
            ("chroot /mnt ls /", &["chroot /mnt ls /", "ls /"]),
            ("command -v rm", &["command -v rm"]),
            (
                "python3 -c \"import os; os.system('ls')\"",
                &["python3 -c import os; os.system('ls')", "ls"],
            ),
            (
                "python3 -c 'import shutil; shutil.rmtree(\"b\")'",
                &["python3 -c import shutil; shutil.rmtree(\"b\")", "rm -r b"],
            ),
            ("perl -e 'unlink \"x\"'", &["perl -e unlink \"x\"", "rm x"]),
            (
                "perl -e 'unlink(\"x\")'",
                &["perl -e unlink(\"x\")", "rm x"],
            ),
        ];
        for (line, want) in cases {
            assert_eq!(&commands(line), want, "{line:?}");
        }
    }

    #[test]
    fn remote_and_data_filled_commands_are_marked() {
        let script = parse("ssh me@h 'rm -rf x' && xargs rm -f").unwrap();
        let marks: Vec<(String, Option<&str>, Option<&str>)> = script
            .commands
            .iter()
            .map(|c| (c.display(), c.remote.as_deref(), c.unknown_args.as_deref()))
            .collect();
        assert_eq!(
            marks,
            [
                ("ssh me@h 'rm -rf x'".to_string(), None, None),
                ("rm -rf x".to_string(), Some("me@h"), None),
                ("xargs rm -f".to_string(), None, None),
                (
                    "rm -f …".to_string(),
                    None,
                    Some("come from the input of `xargs`")
                ),
            ]
        );
        let script = parse("python3 -c 'open(\"/dev/sda\", \"w\")'").unwrap();
        assert_eq!(script.redirects.len(), 1);
        assert_eq!(script.redirects[0].target.text(), "/dev/sda");
        assert!(script.redirects[0].write);
    }

    #[test]
    fn words_keep_what_is_known_now() {
        let script = parse("cp \"$HOME\"/a ~/b ${HOME}/c $X/d ${Y:?}/e \"$(pwd)\" 'lit*'").unwrap();
        let argv = &script.commands[1].argv;
        assert_eq!(argv[1].parts, vec![Part::Home, Part::Lit("/a".into())]);
        assert_eq!(argv[2].text(), "~/b");
        assert_eq!(argv[3].text(), "~/c");
        assert!(!argv[3].is_runtime());
        assert_eq!(
            argv[4].parts[0],
            Part::Var {
                name: "X".into(),
                guarded: false
            }
        );
        assert!(argv[4].is_runtime());
        assert_eq!(
            argv[5].parts[0],
            Part::Var {
                name: "Y".into(),
                guarded: true
            }
        );
        assert_eq!(argv[6].parts, vec![Part::Dynamic("$(pwd)".into())]);
        assert_eq!(argv[7].literal().as_deref(), Some("lit*"));
    }

    #[test]
    fn redirects_are_recorded_with_their_targets() {
        let script =
            parse("echo x > /dev/sda; cat < in 2>>err; ls &> all; make >&2; { a; } >> log")
                .unwrap();
        let got: Vec<(String, bool, String)> = script
            .redirects
            .iter()
            .map(|r| (r.target.text(), r.write, r.command.clone()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("/dev/sda".to_string(), true, "echo x".to_string()),
                ("in".to_string(), false, "cat".to_string()),
                ("err".to_string(), true, "cat".to_string()),
                ("all".to_string(), true, "ls".to_string()),
                ("log".to_string(), true, "{ a }".to_string()),
            ]
        );
    }

    #[test]
    fn output_run_as_code_is_marked() {
        let feeds = |line: &str| -> Vec<String> {
            parse(line)
                .unwrap()
                .commands
                .iter()
                .filter(|c| c.feeds_code)
                .filter_map(|c| c.program())
                .collect()
        };
        assert_eq!(feeds("curl -fsSL https://x.sh | sh"), ["curl"]);
        assert_eq!(feeds("wget -qO- x | sudo bash -s -- --yes"), ["wget"]);
        assert_eq!(feeds("curl x | tee log | python3"), ["curl", "tee"]);
        assert_eq!(feeds("bash <(curl -s x)"), ["curl"]);
        assert_eq!(feeds("source <(curl -s x)"), ["curl"]);
        assert_eq!(feeds("sh < <(curl -s x)"), ["curl"]);
        assert_eq!(feeds("eval \"$(curl -s x)\""), ["curl"]);
        assert_eq!(feeds("bash -c \"$(wget -O- x)\""), ["wget"]);
        assert_eq!(feeds("bash <<< \"$(curl x)\""), ["curl"]);
        assert!(feeds("curl x | jq .").is_empty());
        assert!(feeds("curl x | python3 -c 'import json'").is_empty());
        assert!(feeds("curl -o install.sh x && less install.sh").is_empty());
    }

    #[test]
    fn code_built_at_run_time_is_marked() {
        let dynamic = |line: &str| -> Vec<String> {
            parse(line)
                .unwrap()
                .commands
                .iter()
                .filter_map(|c| c.dynamic_code.clone())
                .collect()
        };
        assert_eq!(dynamic("bash -c \"$CMD\""), ["$CMD"]);
        assert_eq!(dynamic("eval \"$(ssh-agent -s)\""), ["$(ssh-agent -s)"]);
        assert_eq!(dynamic("bash <<EOF\nrm -rf $DIR\nEOF"), ["$DIR"]);
        assert!(dynamic("bash -c 'echo $CMD'").is_empty());
        assert!(dynamic("bash <<'EOF'\nrm -rf $DIR\nEOF").is_empty());
        assert!(dynamic("bash -c \"ls $HOME\"").is_empty());
    }

    #[test]
    fn wrappers_and_parsed_code_are_transparent_but_privilege_is_not() {
        let transparent = |line: &str| -> Vec<bool> {
            parse(line)
                .unwrap()
                .commands
                .iter()
                .map(|c| c.transparent)
                .collect()
        };
        assert_eq!(transparent("timeout 5 cargo test"), [true, false]);
        assert_eq!(transparent("sudo cargo test"), [false, false]);
        assert_eq!(transparent("bash -c 'ls'"), [true, false]);
        assert_eq!(transparent("bash -c \"$X\""), [false, false]);
        assert_eq!(transparent("xargs"), [false]);
    }

    #[test]
    fn fork_bombs_are_found() {
        assert_eq!(parse(":(){ :|:& };:").unwrap().fork_bombs, [":"]);
        assert_eq!(
            parse("bomb() { bomb | bomb & }; bomb").unwrap().fork_bombs,
            ["bomb"]
        );
        assert!(
            parse("walk() { for d in *; do walk \"$d\"; done; }")
                .unwrap()
                .fork_bombs
                .is_empty()
        );
    }

    #[test]
    fn where_a_command_comes_from_is_kept() {
        let script = parse("echo $(bash -c 'sudo reboot')").unwrap();
        let via: Vec<Option<&str>> = script.commands.iter().map(|c| c.via.as_deref()).collect();
        assert_eq!(
            via,
            [
                Some("command substitution"),
                Some("`bash -c` code"),
                Some("`sudo`"),
                None
            ]
        );
    }

    #[test]
    fn what_cannot_be_parsed_is_an_error() {
        let cases: &[(&str, &str)] = &[
            ("", "empty"),
            ("   \n", "empty"),
            ("echo 'unterminated", "the command"),
            ("if then fi", "the command"),
            ("ls |", "the command"),
            ("bash -c 'echo (('", "`bash -c` code"),
            ("eval 'fi'", "`eval` code"),
            ("echo $(if)", "command substitution"),
        ];
        for (line, needle) in cases {
            let err = parse(line).expect_err(line).to_string();
            assert!(err.contains(needle), "{line:?}: {err}");
        }
    }

    #[test]
    fn limits_hold() {
        let deep = format!(
            "{}ls{}",
            "(".repeat(MAX_BRACKET_DEPTH + 1),
            ")".repeat(MAX_BRACKET_DEPTH + 1)
        );
        assert!(matches!(parse(&deep), Err(ParseError::TooDeep { .. })));
        let ok = format!(
            "{}ls{}",
            "( ".repeat(MAX_BRACKET_DEPTH),
            " )".repeat(MAX_BRACKET_DEPTH)
        );
        assert_eq!(commands(&ok), ["ls"]);
        // `((…))` is arithmetic in bash too: nothing runs.
        let arith = format!(
            "{}ls{}",
            "(".repeat(MAX_BRACKET_DEPTH),
            ")".repeat(MAX_BRACKET_DEPTH)
        );
        assert!(commands(&arith).is_empty());
        let subst = format!("{}ls{}", "$(echo ".repeat(30), ")".repeat(30));
        assert_eq!(commands(&subst).len(), 31);

        let mut code = "reboot".to_string();
        for _ in 0..=MAX_CODE_DEPTH {
            code = format!("eval {}", shell_quote(&code));
        }
        assert!(
            matches!(parse(&code), Err(ParseError::CodeTooDeep { .. })),
            "{code}"
        );

        let long = format!("echo {}", "x".repeat(MAX_COMMAND_BYTES));
        assert!(matches!(parse(&long), Err(ParseError::TooLong { .. })));

        let many = vec!["echo $(true)"; MAX_NESTED_PARSES + 1].join("; ");
        assert!(matches!(
            parse(&many),
            Err(ParseError::TooManyNested { .. })
        ));
    }

    #[test]
    fn ansi_c_quotes_are_decoded() {
        assert_eq!(ansi_c(r"\x72\x6d"), "rm");
        assert_eq!(ansi_c(r"a\tb\n"), "a\tb\n");
        assert_eq!(ansi_c(r"\162\155"), "rm");
        assert_eq!(ansi_c(r"\u00e9\'"), "é'");
        assert_eq!(ansi_c(r"\q"), r"\q");
    }
}
