//! Relevance: BM25 over an entry's name, description and headings, plus a
//! little for recency and type. Pure and deterministic: the same entries
//! and query give the same order (ties by name, then scope).
//!
//! Tokens are lowercased words (letters and digits; `-`, `_` and
//! punctuation split), and CJK text becomes overlapping character bigrams,
//! because Chinese has no spaces to split on.

use super::entry::{Entry, Kind};

const K1: f64 = 1.2;
const B: f64 = 0.75;
/// Field weights: a word in the name says more than one in a heading.
const W_NAME: f64 = 3.0;
const W_DESCRIPTION: f64 = 2.0;
const W_HEADING: f64 = 1.0;
/// Most a fresh entry gains over an old one; halves every 30 days.
const RECENCY: f64 = 0.3;
const HALF_LIFE_DAYS: f64 = 30.0;

fn type_weight(kind: Kind) -> f64 {
    match kind {
        Kind::Feedback => 0.3,
        Kind::User => 0.2,
        Kind::Project => 0.1,
        Kind::Reference => 0.0,
    }
}

fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF      // kana
        | 0x3400..=0x4DBF    // CJK extension A
        | 0x4E00..=0x9FFF    // CJK unified
        | 0xAC00..=0xD7AF    // hangul
        | 0xF900..=0xFAFF    // compatibility
        | 0x20000..=0x2FFFF) // extensions B+
}

/// The tokens of `text`: words, and CJK runs as character bigrams (a lone
/// CJK character is its own token).
pub fn tokenize(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut cjk: Vec<char> = Vec::new();
    let flush_cjk = |cjk: &mut Vec<char>, out: &mut Vec<String>| {
        match cjk.len() {
            0 => {}
            1 => out.push(cjk[0].to_string()),
            _ => out.extend(cjk.windows(2).map(|w| w.iter().collect::<String>())),
        }
        cjk.clear();
    };
    for c in text.chars() {
        if is_cjk(c) {
            if !word.is_empty() {
                out.push(std::mem::take(&mut word));
            }
            cjk.push(c);
        } else if c.is_alphanumeric() {
            flush_cjk(&mut cjk, &mut out);
            word.extend(c.to_lowercase());
        } else {
            flush_cjk(&mut cjk, &mut out);
            if !word.is_empty() {
                out.push(std::mem::take(&mut word));
            }
        }
    }
    flush_cjk(&mut cjk, &mut out);
    if !word.is_empty() {
        out.push(word);
    }
    out
}

/// One scored entry; `index` points into the slice given to [`rank`].
#[derive(Debug, Clone, PartialEq)]
pub struct Scored {
    pub index: usize,
    pub score: f64,
}

/// Weighted term frequencies of one entry.
fn doc_terms(e: &Entry) -> (Vec<(String, f64)>, f64) {
    let mut terms: Vec<(String, f64)> = Vec::new();
    let mut add = |text: &str, w: f64| {
        for t in tokenize(text) {
            match terms.iter_mut().find(|(x, _)| *x == t) {
                Some((_, f)) => *f += w,
                None => terms.push((t, w)),
            }
        }
    };
    add(&e.meta.name, W_NAME);
    add(&e.meta.description, W_DESCRIPTION);
    for h in &e.headings {
        add(h, W_HEADING);
    }
    let len = terms.iter().map(|(_, f)| f).sum();
    (terms, len)
}

/// Entries that match `query`, best first, at most `limit`. An entry that
/// shares no token with the query is never returned, however recent.
pub fn rank(entries: &[&Entry], query: &str, now_ms: u64, limit: usize) -> Vec<Scored> {
    let mut q = tokenize(query);
    q.sort();
    q.dedup();
    if q.is_empty() || entries.is_empty() {
        return Vec::new();
    }
    let docs: Vec<(Vec<(String, f64)>, f64)> = entries.iter().map(|e| doc_terms(e)).collect();
    let n = docs.len() as f64;
    let avg = (docs.iter().map(|d| d.1).sum::<f64>() / n).max(1.0);
    let idf: Vec<f64> = q
        .iter()
        .map(|t| {
            let df = docs
                .iter()
                .filter(|d| d.0.iter().any(|(x, _)| x == t))
                .count() as f64;
            (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
        })
        .collect();
    let mut scored: Vec<Scored> = docs
        .iter()
        .enumerate()
        .filter_map(|(i, (terms, len))| {
            let mut bm25 = 0.0;
            for (t, idf) in q.iter().zip(&idf) {
                if let Some((_, f)) = terms.iter().find(|(x, _)| x == t) {
                    bm25 += idf * f * (K1 + 1.0) / (f + K1 * (1.0 - B + B * len / avg));
                }
            }
            if bm25 <= 0.0 {
                return None;
            }
            let e = entries[i];
            let age_days = now_ms.saturating_sub(e.updated_ms) as f64 / 86_400_000.0;
            let recency = RECENCY * 0.5f64.powf(age_days / HALF_LIFE_DAYS);
            Some(Scored {
                index: i,
                score: bm25 + recency + type_weight(e.meta.kind),
            })
        })
        .collect();
    scored.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then_with(|| entries[a.index].meta.name.cmp(&entries[b.index].meta.name))
            .then(a.index.cmp(&b.index))
    });
    scored.truncate(limit);
    scored
}

#[cfg(test)]
mod tests;
