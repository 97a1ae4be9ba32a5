//! Daemon-provided text (step output, agent replies, plan names, errors)
//! made safe for a terminal: escape sequences in it could retitle the
//! window, move the cursor, rewrite the screen or, on some terminals, write
//! the clipboard. Applied only where a terminal reads the text; pipes get
//! the bytes as they were, so scripts see exactly what a step printed.

use std::borrow::Cow;

/// `text` for a terminal when `tty`, else unchanged.
pub fn for_tty(text: &str, tty: bool) -> Cow<'_, str> {
    if tty {
        Cow::Owned(sanitize(text))
    } else {
        Cow::Borrowed(text)
    }
}

/// Drops every escape sequence (CSI, OSC, DCS, SOS, PM, APC and two-byte
/// ESC sequences, in their 7-bit and C1 forms) whole, and every other
/// control character except newline and tab.
pub fn sanitize(text: &str) -> String {
    if !text
        .chars()
        .any(|c| c.is_control() && !matches!(c, '\n' | '\t'))
    {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\n' | '\t' => out.push(c),
            '\x1b' => match chars.next() {
                Some('[') => skip_csi(&mut chars),
                Some(']' | 'P' | 'X' | '^' | '_') => skip_string(&mut chars),
                Some(' '..='/') => skip_escape_tail(&mut chars),
                // ESC + one final byte (ESC c, ESC 7, ...), or ESC alone.
                _ => {}
            },
            '\u{9b}' => skip_csi(&mut chars),
            '\u{9d}' | '\u{90}' | '\u{98}' | '\u{9e}' | '\u{9f}' => skip_string(&mut chars),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

type Chars<'a> = std::iter::Peekable<std::str::Chars<'a>>;

/// Parameter and intermediate bytes, then one final byte.
fn skip_csi(chars: &mut Chars<'_>) {
    while chars.next_if(|c| matches!(c, ' '..='?')).is_some() {}
    chars.next_if(|c| matches!(c, '@'..='~'));
}

/// Up to BEL or the string terminator (ESC \ or U+009C); to the end of the
/// text when unterminated, as a terminal would swallow it.
fn skip_string(chars: &mut Chars<'_>) {
    while let Some(c) = chars.next() {
        match c {
            '\x07' | '\u{9c}' => return,
            '\x1b' => {
                chars.next_if_eq(&'\\');
                return;
            }
            _ => {}
        }
    }
}

/// More intermediate bytes, then one final byte (ESC ( B and the like).
fn skip_escape_tail(chars: &mut Chars<'_>) {
    while chars.next_if(|c| matches!(c, ' '..='/')).is_some() {}
    chars.next_if(|c| matches!(c, '0'..='~'));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_untouched() {
        assert_eq!(sanitize("héllo\tworld\n"), "héllo\tworld\n");
        assert_eq!(for_tty("a\x1b[31mb", false), "a\x1b[31mb");
    }

    #[test]
    fn escape_sequences_go_whole() {
        // OSC retitling the terminal, with BEL and with ST.
        assert_eq!(sanitize("a\x1b]0;pwned\x07b\n"), "ab\n");
        assert_eq!(sanitize("a\x1b]2;pwned\x1b\\b"), "ab");
        // OSC 52 (clipboard), unterminated: swallowed to the end.
        assert_eq!(sanitize("ok\x1b]52;c;ZXZpbA=="), "ok");
        // CSI: colors, cursor moves, screen clears.
        assert_eq!(sanitize("\x1b[1;31mred\x1b[0m"), "red");
        assert_eq!(sanitize("x\x1b[2J\x1b[H\x1b[?1049hy"), "xy");
        // DCS, APC, two-byte and charset sequences.
        assert_eq!(sanitize("a\x1bPq#0\x1b\\b\x1b_apc\x1b\\c"), "abc");
        assert_eq!(sanitize("a\x1bcb\x1b(Bc\x1b"), "abc");
        // C1 forms.
        assert_eq!(sanitize("a\u{9b}31mb\u{9d}0;t\u{9c}c\u{85}d"), "abcd");
    }

    #[test]
    fn other_controls_go_newlines_and_tabs_stay() {
        assert_eq!(sanitize("a\rb\x08c\x07d\x7fe\r\n"), "abcde\n");
        assert_eq!(sanitize("\t1\n2"), "\t1\n2");
    }
}
