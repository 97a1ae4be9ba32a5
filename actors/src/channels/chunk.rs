//! Cutting a reply into chunks a chat platform accepts: each one measures
//! at most `max` in the platform's unit (Telegram counts UTF-16 code units,
//! WeChat counts chars), cut at the most natural break that fits. Only
//! text in, strings out: this module knows nothing of platforms or the room.
//!
//! Concatenated, the chunks give the text back, except that a cut inside a
//! ``` fence closes the fence at the end of its chunk ("\n```") and reopens
//! it with the same opener line at the start of the next, so each chunk
//! renders on its own. Blank space that would be a chunk of its own (a
//! run of it longer than a chunk, or trailing space past the last cut) is
//! dropped: platforms refuse empty messages.

use std::ops::Range;

/// How a platform counts a message's length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    /// UTF-16 code units (Telegram): an astral char such as 😀 or 𝕏 is 2.
    Utf16,
    /// Unicode scalar values (WeChat).
    Chars,
}

impl Measure {
    pub fn of_char(self, c: char) -> usize {
        match self {
            Measure::Utf16 => c.len_utf16(),
            Measure::Chars => 1,
        }
    }

    pub fn of(self, s: &str) -> usize {
        s.chars().map(|c| self.of_char(c)).sum()
    }
}

/// Appended to a chunk cut inside a fence.
const CLOSE: &str = "\n```";
const CLOSE_LEN: usize = 4;

/// Cuts `text` into chunks of at most `max` (by `measure`), preferring a
/// paragraph break, then a line break, a sentence end, a space, and only
/// then a cut between two chars. Empty or blank text gives no chunk.
/// A `max` below 2 cannot hold an astral char in UTF-16; such a char still
/// gets a chunk of its own so that the split always ends.
pub fn split(text: &str, max: usize, measure: Measure) -> Vec<String> {
    parts(text, max, measure)
        .iter()
        .map(|p| p.render(text))
        .collect()
}

/// One chunk: a slice of the text, maybe wrapped in a fence reopen/close.
#[derive(Debug)]
struct Part<'a> {
    open: Option<&'a str>,
    body: Range<usize>,
    close: bool,
}

impl Part<'_> {
    fn render(&self, text: &str) -> String {
        let mut s = String::new();
        if let Some(op) = self.open {
            s.push_str(op);
            s.push('\n');
        }
        s.push_str(&text[self.body.clone()]);
        if self.close {
            s.push_str(CLOSE);
        }
        s
    }
}

fn parts(text: &str, max: usize, measure: Measure) -> Vec<Part<'_>> {
    let fences = Fences::scan(text);
    // A fence is repaired only where a chunk can hold its reopen line, a
    // close and still one astral char; otherwise cuts leave it alone.
    let repairable = |op: &&str| measure.of(op) + 1 + 2 * CLOSE_LEN + 2 <= max;
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < text.len() {
        if text[pos..].trim().is_empty() {
            break;
        }
        let open = fences.state_at(pos).filter(repairable);
        let room = max.saturating_sub(open.map_or(0, |op| measure.of(op) + 1));
        let mut cut = pick_cut(text, pos, room, measure);
        let mut close = false;
        if cut < text.len() && fences.state_at(cut).filter(repairable).is_some() {
            // The close must fit too: cut again with its room reserved.
            cut = pick_cut(text, pos, room.saturating_sub(CLOSE_LEN), measure);
            close = cut < text.len() && fences.state_at(cut).filter(repairable).is_some();
        }
        if !text[pos..cut].trim().is_empty() {
            out.push(Part {
                open,
                body: pos..cut,
                close,
            });
        }
        pos = cut;
    }
    out
}

/// Where the chunk starting at `pos` with `room` to fill ends.
fn pick_cut(text: &str, pos: usize, room: usize, measure: Measure) -> usize {
    let rest = &text[pos..];
    let mut used = 0;
    let mut end = pos;
    for (i, c) in rest.char_indices() {
        used += measure.of_char(c);
        if used > room {
            break;
        }
        end = pos + i + c.len_utf8();
    }
    if end == text.len() {
        return end;
    }
    if end == pos {
        return pos + rest.chars().next().map_or(0, char::len_utf8);
    }
    let window = &text[pos..end];
    let finders: [fn(&str) -> Option<usize>; 4] = [
        |w| w.rfind("\n\n").map(|i| i + 2),
        |w| w.rfind('\n').map(|i| i + 1),
        |w| {
            [". ", "! ", "? ", "。", "！", "？"]
                .iter()
                .filter_map(|p| w.rfind(p).map(|i| i + p.len()))
                .max()
        },
        |w| w.rfind([' ', '\t']).map(|i| i + 1),
    ];
    finders
        .iter()
        .filter_map(|f| f(window))
        // The last break of a kind is the best one; if it leaves only blank
        // space before it, so would every earlier one of that kind.
        .find(|&c| !window[..c].trim().is_empty())
        .map_or(end, |c| pos + c)
}

/// The ``` fences of a text, line by line.
struct Fences<'a> {
    /// Each line's start and the opener line in force after it.
    lines: Vec<(usize, Option<&'a str>)>,
}

impl<'a> Fences<'a> {
    fn scan(text: &'a str) -> Fences<'a> {
        let mut lines = Vec::new();
        let mut state: Option<&str> = None;
        let mut start = 0;
        for line in text.split_inclusive('\n') {
            let t = line.trim();
            if t.starts_with("```") {
                state = match state {
                    None => Some(t),
                    // Only a bare ``` closes; "```lang" inside is content.
                    Some(_) if t.trim_start_matches('`').trim().is_empty() => None,
                    open => open,
                };
            }
            lines.push((start, state));
            start += line.len();
        }
        Fences { lines }
    }

    /// The fence open at byte `p`: a line counts once it has begun.
    fn state_at(&self, p: usize) -> Option<&'a str> {
        let n = self.lines.partition_point(|(s, _)| *s < p);
        n.checked_sub(1).and_then(|i| self.lines[i].1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    /// Checks every promise of `split` for one input.
    fn check(text: &str, max: usize, measure: Measure) -> Vec<String> {
        let parts = parts(text, max, measure);
        let chunks = split(text, max, measure);
        assert_eq!(parts.len(), chunks.len());
        let mut joined = String::new();
        for (i, (p, c)) in parts.iter().zip(&chunks).enumerate() {
            assert!(
                measure.of(c) <= max,
                "chunk {i} measures {} > {max}: {c:?} (text {text:?})",
                measure.of(c)
            );
            assert!(!c.trim().is_empty(), "chunk {i} is blank (text {text:?})");
            assert_eq!(*c, p.render(text));
            // A close is always answered by a reopen of the next chunk.
            if p.close {
                let next = parts.get(i + 1).expect("a closed chunk is not the last");
                assert!(next.open.is_some(), "chunk {i} closed, next not reopened");
            }
            joined.push_str(&text[p.body.clone()]);
        }
        let squeeze = |s: &str| s.split_whitespace().collect::<String>();
        assert_eq!(squeeze(&joined), squeeze(text), "chunks lost content");
        // Blank space is dropped only where it cannot share a chunk with
        // content; with chunks far longer than any run of it, only at the end.
        if max >= 12 {
            assert!(
                text.starts_with(&joined) && text[joined.len()..].trim().is_empty(),
                "chunks do not give the text back:\n{joined:?}\nvs\n{text:?}"
            );
        }
        chunks
    }

    #[test]
    fn empty_and_blank_text_give_no_chunk() {
        assert!(split("", 10, Measure::Utf16).is_empty());
        assert!(split(" \n\n \t", 10, Measure::Chars).is_empty());
        assert_eq!(split("hi", 10, Measure::Utf16), vec!["hi"]);
    }

    #[test]
    fn prefers_paragraph_then_line_then_sentence_then_space() {
        let c = check("aaa bbb.\nccc\n\nddd eee", 16, Measure::Chars);
        assert_eq!(c, vec!["aaa bbb.\nccc\n\n", "ddd eee"]);
        let c = check("aaa bbb. ccc\nddd eee", 16, Measure::Chars);
        assert_eq!(c, vec!["aaa bbb. ccc\n", "ddd eee"]);
        let c = check("aaa bbb. ccc ddd eee", 16, Measure::Chars);
        assert_eq!(c, vec!["aaa bbb. ", "ccc ddd eee"]);
        let c = check("aaa bbb ccc ddd eee", 16, Measure::Chars);
        assert_eq!(c, vec!["aaa bbb ccc ddd ", "eee"]);
        let c = check("你好世界。再见世界", 6, Measure::Chars);
        assert_eq!(c, vec!["你好世界。", "再见世界"]);
        let c = check("abcdefghij", 4, Measure::Chars);
        assert_eq!(c, vec!["abcd", "efgh", "ij"]);
    }

    #[test]
    fn utf16_counts_astral_chars_as_two_and_never_splits_them() {
        let text = "𝕏".repeat(5);
        let c = check(&text, 3, Measure::Utf16);
        assert_eq!(c, vec!["𝕏"; 5]);
        let c = check(&text, 4, Measure::Utf16);
        assert_eq!(c, vec!["𝕏𝕏", "𝕏𝕏", "𝕏"]);
        assert_eq!(check(&text, 4, Measure::Chars), vec!["𝕏𝕏𝕏𝕏", "𝕏"]);
        check(&"🧑‍💻".repeat(20), 7, Measure::Utf16);
    }

    #[test]
    fn a_cut_inside_a_fence_closes_and_reopens_it() {
        let text = "Look:\n```rust\nlet a = 1;\nlet b = 2;\nlet c = 3;\n```\nDone.";
        let c = check(text, 30, Measure::Chars);
        assert_eq!(
            c,
            vec![
                "Look:\n```rust\nlet a = 1;\n\n```",
                "```rust\nlet b = 2;\n\n```",
                "```rust\nlet c = 3;\n```\nDone."
            ]
        );
    }

    #[test]
    fn a_fence_with_an_info_line_inside_stays_open() {
        let f = Fences::scan("```\n```rust\nx\n```\ny\n");
        assert_eq!(f.state_at(13), Some("```"));
        assert_eq!(f.state_at(19), None);
    }

    fn generate(rng: &mut StdRng) -> String {
        const WORDS: &[&str] = &[
            "hello",
            "world",
            "a",
            "Telegram",
            "你好",
            "世界",
            "中文文本",
            "😀",
            "𝕏",
            "🧑‍💻",
            "naïve",
            "ü",
            "x=1;",
            "🇫🇷",
        ];
        const SEPS: &[&str] = &[
            " ", " ", " ", "\n", "\n\n", ". ", "! ", "? ", "。", "！", "？", ", ", "\t",
        ];
        let mut s = String::new();
        let mut fenced = false;
        for _ in 0..rng.gen_range(0..120) {
            match rng.gen_range(0..20) {
                0 => {
                    // A word longer than any chunk.
                    let w = WORDS[rng.gen_range(0..WORDS.len())];
                    s.push_str(&w.repeat(rng.gen_range(5..40)));
                }
                1 => {
                    if !s.is_empty() && !s.ends_with('\n') {
                        s.push('\n');
                    }
                    s.push_str(if fenced {
                        "```\n"
                    } else {
                        ["```rust\n", "```\n", "```py\n"][rng.gen_range(0..3)]
                    });
                    fenced = !fenced;
                }
                _ => {
                    s.push_str(WORDS[rng.gen_range(0..WORDS.len())]);
                    s.push_str(SEPS[rng.gen_range(0..SEPS.len())]);
                }
            }
        }
        s
    }

    #[test]
    fn generated_texts_fit_and_give_the_text_back() {
        let mut rng = StdRng::seed_from_u64(15);
        let mut fence_repairs = 0;
        for round in 0..3000 {
            let text = generate(&mut rng);
            let max = rng.gen_range(2..90);
            let measure = if round % 2 == 0 {
                Measure::Utf16
            } else {
                Measure::Chars
            };
            let chunks = check(&text, max, measure);
            fence_repairs += chunks.iter().filter(|c| c.ends_with(CLOSE)).count();
        }
        // The generator must actually exercise the fence repair.
        assert!(fence_repairs > 100, "only {fence_repairs} fence repairs");
    }

    #[test]
    fn a_code_fence_longer_than_max_is_cut_into_closed_blocks() {
        let mut text = String::from("```python\n");
        for i in 0..200 {
            text.push_str(&format!("print('line {i} 😀')\n"));
        }
        text.push_str("```\n");
        let chunks = check(&text, 100, Measure::Utf16);
        assert!(chunks.len() > 20);
        for c in &chunks {
            assert!(c.starts_with("```python\n"), "{c:?}");
            assert!(c.ends_with("```") || c.ends_with("```\n"), "{c:?}");
        }
    }

    #[test]
    fn telegram_sized_chunks_of_cjk_and_emoji() {
        let text = "这是一个很长的句子，包含表情😀和𝕏。".repeat(1000);
        let chunks = check(&text, 4096, Measure::Utf16);
        assert!(chunks.len() > 3);
        assert!(chunks.iter().all(|c| c.ends_with('。')));
    }
}
