//! What the model sees of a tool's output: at most [`MODEL_OUTPUT_LIMIT`]
//! characters, the middle cut out. Sessions and sub-runs both cut here, so
//! a tool answers the same length to either.

/// Characters of a tool output the model gets; longer outputs keep their
/// head and tail around a note saying how much was cut.
pub const MODEL_OUTPUT_LIMIT: usize = 16_000;

pub(crate) fn cut_note(cut: usize) -> String {
    format!("\n\n[... {cut} characters cut here ...]\n\n")
}

/// Shortens `content` to at most [`MODEL_OUTPUT_LIMIT`] chars (note
/// included) by cutting the middle: the start of an output says what it is
/// and the end usually says how it ended (errors, exit status), so both are
/// kept. Returns the text and how many chars were cut.
pub fn truncate_for_model(content: String) -> (String, usize) {
    let total = content.chars().count();
    if total <= MODEL_OUTPUT_LIMIT {
        return (content, 0);
    }
    // The note for `total` is at least as long as the real one, so the
    // result never exceeds the limit.
    let keep = MODEL_OUTPUT_LIMIT.saturating_sub(cut_note(total).chars().count());
    let head = keep / 2;
    let tail = keep - head;
    let cut = total - keep;
    let byte_at = |chars: usize| {
        content
            .char_indices()
            .nth(chars)
            .map_or(content.len(), |(i, _)| i)
    };
    let head_end = byte_at(head);
    let tail_start = byte_at(total - tail);
    let mut out = String::with_capacity(head_end + (content.len() - tail_start) + 64);
    out.push_str(content.get(..head_end).unwrap_or_default());
    out.push_str(&cut_note(cut));
    out.push_str(content.get(tail_start..).unwrap_or_default());
    (out, cut)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_boundaries_and_multibyte_text() {
        let exact = "é".repeat(MODEL_OUTPUT_LIMIT);
        assert_eq!(truncate_for_model(exact.clone()), (exact, 0));
        let over = "é".repeat(MODEL_OUTPUT_LIMIT + 1);
        let (text, cut) = truncate_for_model(over);
        let kept = text.chars().count() - cut_note(cut).len();
        assert!(text.chars().count() <= MODEL_OUTPUT_LIMIT);
        assert_eq!(kept + cut, MODEL_OUTPUT_LIMIT + 1);
        assert!(text.starts_with('é') && text.ends_with('é'));
        let huge = format!("HEAD{}TAIL", "ß".repeat(1_000_000));
        let (text, cut) = truncate_for_model(huge);
        assert!(text.starts_with("HEAD") && text.ends_with("TAIL"));
        assert!(text.chars().count() <= MODEL_OUTPUT_LIMIT);
        assert_eq!(text.chars().count() - cut_note(cut).len() + cut, 1_000_008);
    }
}
