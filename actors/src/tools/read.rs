//! read: the `read` tool — shows a text file inside the session workdir
//! with line numbers (as `cat -n`), a line range at a time, and refuses
//! binary files.
//!
//! It only reads; confinement is [`super::fs_guard`]'s job. Its output stays
//! under the session's 16 K-character cut so the note saying how to read on
//! always reaches the model.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Cursor, Read};
use std::path::Path;

use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use super::builtin::{OnCancel, parse_args, run_blocking};
use super::fs_guard;
use super::{Tool, ToolContext, ToolFuture, ToolOutput};

/// Lines shown when the call gives no `limit`.
pub const DEFAULT_LIMIT: u64 = 2000;
/// Bytes of numbered lines in one answer; below the loop's 16 K-char cut so
/// the trailing note survives.
pub const MAX_OUTPUT_BYTES: usize = 15_000;
/// Longer lines are cut (minified files would otherwise fill the answer).
pub const MAX_LINE_CHARS: usize = 2000;
/// Bytes looked at to decide whether a file is binary.
const SNIFF_BYTES: u64 = 8192;
/// After the shown range, bytes scanned to count the remaining lines; past
/// this the note says "more" instead of a number.
const MAX_COUNT_BYTES: u64 = 64 << 20;

const EXPECTED: &str = "{\"path\": string, \"offset\"?: integer (1-based first line, default 1), \
                        \"limit\"?: integer (lines, default 2000)}";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    path: String,
    #[serde(default)]
    offset: Option<u64>,
    #[serde(default)]
    limit: Option<u64>,
}

pub struct ReadTool;

impl Tool for ReadTool {
    fn name(&self) -> &'static str {
        "read"
    }

    fn description(&self) -> &'static str {
        "Reads a text file inside the session workdir and shows it with line numbers \
         (`   12\\tcode`). Paths are relative to the workdir (absolute paths inside it also \
         work). By default shows the first 2000 lines; pass `offset` (1-based line) and \
         `limit` to read a range, e.g. to continue where a truncated answer stopped. \
         Output is capped at about 15,000 bytes and lines longer than 2000 characters are \
         cut. Binary files are refused. Line numbers are not part of the file: leave them \
         out of `edit`'s old_string."
    }

    fn input_schema(&self) -> &'static str {
        r#"{
  "type": "object",
  "properties": {
    "path": {"type": "string", "description": "File to read, relative to the session workdir."},
    "offset": {"type": "integer", "minimum": 1, "description": "First line to show, 1-based. Default 1."},
    "limit": {"type": "integer", "minimum": 1, "description": "Number of lines to show. Default 2000."}
  },
  "required": ["path"],
  "additionalProperties": false
}"#
    }

    fn concurrency_safe(&self, _args_json: &str) -> bool {
        true
    }

    fn call<'a>(&'a self, ctx: &'a ToolContext, args_json: &'a str) -> ToolFuture<'a> {
        Box::pin(async move {
            let args: Args = match parse_args("read", args_json, EXPECTED) {
                Ok(args) => args,
                Err(out) => return out,
            };
            if args.limit == Some(0) {
                return ToolOutput::error(
                    "limit must be at least 1: give the number of lines to show, or leave it out \
                     for 2000",
                );
            }
            let path = match fs_guard::resolve(&ctx.workdir, &args.path) {
                Ok(path) => path,
                Err(err) => return ToolOutput::error(err.to_string()),
            };
            let shown = fs_guard::display_rel(&ctx.workdir, &path);
            // `offset: 0` is taken as the start: models mix 0- and 1-based.
            let offset = args.offset.unwrap_or(1).max(1);
            let limit = args.limit.unwrap_or(DEFAULT_LIMIT);
            run_blocking(ctx, "read", OnCancel::Abandon, move |cancel| {
                read_lines(&path, &shown, offset, limit, &cancel)
            })
            .await
        })
    }
}

/// True when `head` (the start of a file) is not text: it has a NUL byte, or
/// more than a tenth of it is not valid UTF-8 (Latin-1 text with a few
/// accents still reads, lossily).
pub(crate) fn looks_binary(head: &[u8]) -> bool {
    if head.contains(&0) {
        return true;
    }
    let invalid: usize = head.utf8_chunks().map(|c| c.invalid().len()).sum();
    invalid * 10 > head.len()
}

/// Why the shown range ended before the end of the file.
enum Stop {
    Limit,
    Bytes,
}

fn read_lines(
    path: &Path,
    shown: &str,
    offset: u64,
    limit: u64,
    cancel: &CancellationToken,
) -> ToolOutput {
    match read_lines_io(path, shown, offset, limit, cancel) {
        Ok(out) => out,
        Err(err) if err.kind() == io::ErrorKind::NotFound => ToolOutput::error(format!(
            "{shown} does not exist: check the name with glob (paths are relative to the \
             session workdir)"
        )),
        Err(err) => ToolOutput::error(format!("cannot read {shown}: {err}")),
    }
}

fn read_lines_io(
    path: &Path,
    shown: &str,
    offset: u64,
    limit: u64,
    cancel: &CancellationToken,
) -> io::Result<ToolOutput> {
    let meta = std::fs::metadata(path)?;
    if meta.is_dir() {
        return Ok(ToolOutput::error(format!(
            "{shown} is a directory, not a file: use glob with path \"{shown}\" to list its files"
        )));
    }
    let mut file = File::open(path)?;
    let mut head = Vec::with_capacity(SNIFF_BYTES as usize);
    (&mut file).take(SNIFF_BYTES).read_to_end(&mut head)?;
    if head.is_empty() {
        return Ok(ToolOutput::ok(format!("{shown} is empty (0 bytes).")));
    }
    if looks_binary(&head) {
        return Ok(ToolOutput::error(format!(
            "{shown} is a binary file ({} bytes): read only shows text; use bash (e.g. `file` \
             or `xxd | head`) to inspect it",
            meta.len()
        )));
    }
    let mut reader = BufReader::with_capacity(64 << 10, Cursor::new(head).chain(file));

    let mut out = String::new();
    let mut line = Vec::new();
    let mut line_no: u64 = 0;
    let mut last_shown: u64 = 0;
    let mut stop = None;
    while stop.is_none() {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        line_no += 1;
        if line_no.is_multiple_of(4096) && cancel.is_cancelled() {
            return Ok(ToolOutput::error("read was stopped: the run was cancelled"));
        }
        if line_no < offset {
            continue;
        }
        if line_no - offset >= limit {
            stop = Some(Stop::Limit);
            break;
        }
        let numbered = number_line(line_no, &line);
        // The first line is always shown, even if it alone is over the cap
        // (it is already cut to MAX_LINE_CHARS).
        if last_shown != 0 && out.len() + numbered.len() > MAX_OUTPUT_BYTES {
            stop = Some(Stop::Bytes);
            break;
        }
        out.push_str(&numbered);
        last_shown = line_no;
    }

    if last_shown == 0 && stop.is_none() {
        // Ran out of lines before reaching `offset`.
        return Ok(ToolOutput::error(format!(
            "{shown} has {line_no} lines; offset {offset} is past its end: use an offset from 1 \
             to {line_no}"
        )));
    }
    let Some(stop) = stop else {
        return Ok(ToolOutput::ok(out));
    };
    // The line that stopped us was read but not shown; count it and the rest.
    let (rest, complete) = count_lines(&mut reader, cancel)?;
    let total = line_no + rest;
    let total = if complete {
        total.to_string()
    } else {
        format!("more than {total}")
    };
    let next = last_shown + 1;
    let why = match stop {
        Stop::Limit => String::new(),
        Stop::Bytes => format!(" (the answer is capped at {MAX_OUTPUT_BYTES} bytes)"),
    };
    out.push_str(&format!(
        "\n[showing lines {offset}-{last_shown} of {total}{why}; call read with offset {next} to \
         see more]"
    ));
    Ok(ToolOutput::ok(out))
}

/// `cat -n` style: right-aligned number, tab, the line without its line
/// terminator, cut at [`MAX_LINE_CHARS`].
fn number_line(n: u64, raw: &[u8]) -> String {
    let raw = raw.strip_suffix(b"\n").unwrap_or(raw);
    let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
    let text = String::from_utf8_lossy(raw);
    match text.char_indices().nth(MAX_LINE_CHARS) {
        Some((cut, _)) => format!(
            "{n:>6}\t{}… [line cut at {MAX_LINE_CHARS} characters]\n",
            &text[..cut]
        ),
        None => format!("{n:>6}\t{text}\n"),
    }
}

/// Counts the lines left in `reader` (a last line without `\n` counts),
/// scanning at most [`MAX_COUNT_BYTES`]. Returns (lines, reached the end).
fn count_lines(reader: &mut impl BufRead, cancel: &CancellationToken) -> io::Result<(u64, bool)> {
    let mut lines = 0;
    let mut scanned: u64 = 0;
    let mut partial = false;
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok((lines + u64::from(partial), true));
        }
        let n = buf.len();
        lines += buf.iter().filter(|&&b| b == b'\n').count() as u64;
        partial = buf.last() != Some(&b'\n');
        reader.consume(n);
        scanned += n as u64;
        if scanned > MAX_COUNT_BYTES || cancel.is_cancelled() {
            return Ok((lines, false));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::builtin::test_support::{call, ctx};
    use serde_json::json;

    fn numbered(n: usize) -> String {
        (1..=n).map(|i| format!("line {i}\n")).collect()
    }

    #[tokio::test]
    async fn reads_whole_small_file_with_line_numbers() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "alpha\r\nbeta\ngamma").unwrap();
        let out = call(&ReadTool, &ctx(dir.path()), json!({"path": "a.txt"})).await;
        assert!(!out.is_error, "{out:?}");
        assert_eq!(out.content, "     1\talpha\n     2\tbeta\n     3\tgamma\n");
    }

    #[tokio::test]
    async fn line_ranges_and_the_continue_note() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("n.txt"), numbered(50)).unwrap();
        let c = ctx(dir.path());
        let out = call(
            &ReadTool,
            &c,
            json!({"path": "n.txt", "offset": 10, "limit": 5}),
        )
        .await;
        assert!(!out.is_error, "{out:?}");
        let lines: Vec<&str> = out.content.lines().collect();
        assert_eq!(lines[0], "    10\tline 10");
        assert_eq!(lines[4], "    14\tline 14");
        assert!(!out.content.contains("line 15\n"));
        assert!(
            out.content
                .contains("[showing lines 10-14 of 50; call read with offset 15 to see more]"),
            "{}",
            out.content
        );
        // The tail: no note when the end is reached.
        let out = call(&ReadTool, &c, json!({"path": "n.txt", "offset": 48})).await;
        assert_eq!(
            out.content,
            "    48\tline 48\n    49\tline 49\n    50\tline 50\n"
        );
        // Past the end.
        let out = call(&ReadTool, &c, json!({"path": "n.txt", "offset": 51})).await;
        assert!(
            out.is_error && out.content.contains("has 50 lines"),
            "{out:?}"
        );
        // Default limit.
        std::fs::write(dir.path().join("big.txt"), "x\n".repeat(2500)).unwrap();
        let out = call(&ReadTool, &c, json!({"path": "big.txt"})).await;
        assert!(
            out.content.contains("of 2500"),
            "{}",
            &out.content[out.content.len() - 200..]
        );
    }

    #[tokio::test]
    async fn output_is_bounded_in_bytes_and_long_lines_are_cut() {
        let dir = tempfile::tempdir().unwrap();
        let long = "y".repeat(5000);
        let body: String = (0..100).map(|_| format!("{long}\n")).collect();
        std::fs::write(dir.path().join("wide.txt"), body).unwrap();
        let out = call(&ReadTool, &ctx(dir.path()), json!({"path": "wide.txt"})).await;
        assert!(!out.is_error);
        assert!(
            out.content.len() < MAX_OUTPUT_BYTES + 300,
            "{}",
            out.content.len()
        );
        assert!(out.content.contains("[line cut at 2000 characters]"));
        assert!(
            out.content.contains("capped at 15000 bytes"),
            "{}",
            out.content
        );
        assert!(out.content.contains("of 100"));
    }

    #[tokio::test]
    async fn binary_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let c = ctx(dir.path());
        std::fs::write(dir.path().join("nul.bin"), b"ELF\x00\x01\x02text").unwrap();
        let out = call(&ReadTool, &c, json!({"path": "nul.bin"})).await;
        assert!(
            out.is_error && out.content.contains("is a binary file"),
            "{out:?}"
        );
        let noise: Vec<u8> = (0..4096u32).map(|i| 0x80 | (i % 0x3f) as u8).collect();
        std::fs::write(dir.path().join("noise.bin"), noise).unwrap();
        let out = call(&ReadTool, &c, json!({"path": "noise.bin"})).await;
        assert!(
            out.is_error && out.content.contains("is a binary file"),
            "{out:?}"
        );
        // A few Latin-1 bytes in text are not binary.
        std::fs::write(
            dir.path().join("latin1.txt"),
            b"caf\xe9 au lait, na\xefve\n",
        )
        .unwrap();
        let out = call(&ReadTool, &c, json!({"path": "latin1.txt"})).await;
        assert!(!out.is_error, "{out:?}");
    }

    #[tokio::test]
    async fn missing_files_directories_and_escapes_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        let c = ctx(dir.path());
        let out = call(&ReadTool, &c, json!({"path": "nope.txt"})).await;
        assert!(
            out.is_error && out.content.contains("does not exist"),
            "{out:?}"
        );
        let out = call(&ReadTool, &c, json!({"path": "sub"})).await;
        assert!(
            out.is_error && out.content.contains("is a directory"),
            "{out:?}"
        );
        let out = call(&ReadTool, &c, json!({"path": "../etc/passwd"})).await;
        assert!(
            out.is_error && out.content.contains("outside the session workdir"),
            "{out:?}"
        );
        let out = call(&ReadTool, &c, json!({"path": "/etc/passwd"})).await;
        assert!(
            out.is_error && out.content.contains("outside the session workdir"),
            "{out:?}"
        );
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("s.txt"), "secret").unwrap();
        std::os::unix::fs::symlink(outside.path().join("s.txt"), dir.path().join("l.txt")).unwrap();
        let out = call(&ReadTool, &c, json!({"path": "l.txt"})).await;
        assert!(out.is_error && out.content.contains("symlink"), "{out:?}");
        assert!(!out.content.contains("secret\n"));
    }

    #[tokio::test]
    async fn empty_file_says_so() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("e"), "").unwrap();
        let out = call(&ReadTool, &ctx(dir.path()), json!({"path": "e"})).await;
        assert!(!out.is_error && out.content.contains("is empty"), "{out:?}");
    }
}
