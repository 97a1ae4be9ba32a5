//! Relevance: BM25 over an entry's name, description and headings, plus a
//! little for recency and type. Pure and deterministic: the same entries
//! and query give the same order (ties by name, then scope).
//!
//! Tokens are lowercased words (letters and digits; `-`, `_` and
//! punctuation split), and CJK text becomes overlapping character bigrams,
//! because Chinese has no spaces to split on.

use super::entry::{Entry, Kind};
use std::collections::HashMap;

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
        Kind::Reference | Kind::Declared(_) => 0.0,
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

/// English function words left out of queries (sorted, for the search).
const STOPWORDS: &[&str] = &[
    "a", "about", "after", "all", "also", "am", "an", "and", "any", "are", "as", "at", "be",
    "been", "before", "but", "by", "can", "could", "did", "do", "does", "for", "from", "had",
    "has", "have", "he", "her", "his", "how", "i", "if", "in", "into", "is", "it", "its", "me",
    "my", "no", "not", "now", "of", "on", "or", "our", "please", "she", "should", "so", "some",
    "than", "that", "the", "their", "them", "then", "there", "these", "they", "this", "to", "up",
    "us", "was", "we", "were", "what", "when", "where", "which", "who", "why", "will", "with",
    "would", "you", "your",
];

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

/// An entry's weighted term frequencies: what ranking reads of it, kept
/// by the scope actor between searches (tokenizing is most of a search).
#[derive(Debug, Clone, PartialEq)]
pub struct Doc {
    terms: Vec<(String, f64)>,
    len: f64,
}

impl Doc {
    pub fn of(e: &Entry) -> Doc {
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
        Doc { terms, len }
    }
}

/// The terms of a run of entries as postings (term → the entries that
/// have it, with its weighted frequency), so a search visits only the
/// entries that share a term with the query. A scope actor keeps one per
/// folder between searches.
#[derive(Debug, Clone, Default)]
pub struct Postings {
    map: HashMap<String, Vec<(usize, f64)>>,
    /// Each entry's length, in order.
    lens: Vec<f64>,
}

impl Postings {
    pub fn of<'a>(docs: impl IntoIterator<Item = &'a Doc>) -> Postings {
        let mut p = Postings::default();
        for (i, d) in docs.into_iter().enumerate() {
            for (t, f) in &d.terms {
                p.map.entry(t.clone()).or_default().push((i, *f));
            }
            p.lens.push(d.len);
        }
        p
    }

    pub fn len(&self) -> usize {
        self.lens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lens.is_empty()
    }
}

/// Entries that match `query`, best first, at most `limit`. An entry that
/// shares no token with the query is never returned, however recent.
pub fn rank(entries: &[&Entry], query: &str, now_ms: u64, limit: usize) -> Vec<Scored> {
    let postings = Postings::of(&entries.iter().map(|e| Doc::of(e)).collect::<Vec<_>>());
    rank_indexed(entries, &[&postings], query, now_ms, limit)
}

/// [`rank`] over entries whose postings are made already: `parts` cover
/// `entries` in order (part 0 its first entries, and so on), and rank as
/// one collection.
pub fn rank_indexed(
    entries: &[&Entry],
    parts: &[&Postings],
    query: &str,
    now_ms: u64,
    limit: usize,
) -> Vec<Scored> {
    let mut q = tokenize(query);
    // A query's function words would match almost every entry: "the" in a
    // message must not be what brings a memory into the prompt.
    q.retain(|t| !STOPWORDS.contains(&t.as_str()));
    q.sort();
    q.dedup();
    if q.is_empty()
        || entries.is_empty()
        || parts.iter().map(|p| p.len()).sum::<usize>() != entries.len()
    {
        return Vec::new();
    }
    let n = entries.len() as f64;
    // One running sum in entry order: the same float whatever the parts.
    let avg = (parts.iter().flat_map(|p| &p.lens).sum::<f64>() / n).max(1.0);
    let mut bm25 = vec![0.0f64; entries.len()];
    // Query terms in sorted order, as each entry's sum always adds them.
    for t in &q {
        let hits: Vec<(usize, &[(usize, f64)])> = parts
            .iter()
            .scan(0usize, |offset, p| {
                let at = *offset;
                *offset += p.len();
                Some((at, p.map.get(t).map_or(&[][..], |v| v.as_slice())))
            })
            .collect();
        let df = hits.iter().map(|(_, h)| h.len()).sum::<usize>() as f64;
        let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
        for (at, h) in hits {
            for &(i, f) in h {
                let i = at + i;
                let len = parts_len(parts, i);
                bm25[i] += idf * f * (K1 + 1.0) / (f + K1 * (1.0 - B + B * len / avg));
            }
        }
    }
    let mut scored: Vec<Scored> = bm25
        .iter()
        .enumerate()
        .filter(|(_, b)| **b > 0.0)
        .map(|(i, b)| {
            let e = entries[i];
            let age_days = now_ms.saturating_sub(e.updated_ms) as f64 / 86_400_000.0;
            let recency = RECENCY * 0.5f64.powf(age_days / HALF_LIFE_DAYS);
            Scored {
                index: i,
                score: b + recency + type_weight(e.meta.kind),
            }
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

/// The length of entry `i` of the concatenated parts.
fn parts_len(parts: &[&Postings], mut i: usize) -> f64 {
    for p in parts {
        if i < p.len() {
            return p.lens[i];
        }
        i -= p.len();
    }
    0.0
}

#[cfg(test)]
mod tests;
