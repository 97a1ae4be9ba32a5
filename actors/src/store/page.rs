//! Pages: one stored value holding many small entries, each an id and its
//! bytes, in ascending id order. A room that keeps a stream of small
//! records under consecutive ids (the plans) puts them a page to a key, so
//! that the records a group commit writes together cost sled one insert.
//!
//! A write of one entry travels through the WAL as that entry alone
//! ([`super::Batch::set_entry`]); the commit thread and replay patch it
//! into the page sled holds. Layout of a page: for each entry, the id
//! (u64), the length (u32, both big-endian) and the bytes.

use std::ops::Range;

/// One entry of a page: its id and where its bytes are.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub id: u64,
    pub range: Range<usize>,
}

const HEAD: usize = 12;

/// The entries of `page`, or what is wrong with it.
pub fn parse(page: &[u8]) -> Result<Vec<Entry>, String> {
    let mut entries = Vec::new();
    let mut at = 0;
    while at < page.len() {
        let head = page
            .get(at..at + HEAD)
            .ok_or_else(|| format!("an entry header is cut at byte {at}"))?;
        let mut id = [0; 8];
        id.copy_from_slice(&head[..8]);
        let id = u64::from_be_bytes(id);
        let len = u32::from_be_bytes([head[8], head[9], head[10], head[11]]) as usize;
        let start = at + HEAD;
        if page.len() - start < len {
            return Err(format!("entry {id} is cut ({len} bytes announced)"));
        }
        entries.push(Entry {
            id,
            range: start..start + len,
        });
        at = start + len;
    }
    Ok(entries)
}

/// The bytes of entry `id` in `page`, if it has one.
pub fn find<'a>(page: &'a [u8], entries: &[Entry], id: u64) -> Option<&'a [u8]> {
    entries
        .iter()
        .find(|e| e.id == id)
        .map(|e| &page[e.range.clone()])
}

/// `page` (parsed as `entries`) with entry `id` set to `value`, or
/// dropped. An empty result is an empty page.
pub fn with(page: &[u8], entries: &[Entry], id: u64, value: Option<&[u8]>) -> Vec<u8> {
    let mut out = Vec::with_capacity(page.len() + value.map_or(0, |v| v.len() + HEAD));
    let mut push = |id: u64, v: &[u8]| {
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&(v.len() as u32).to_be_bytes());
        out.extend_from_slice(v);
    };
    let mut placed = false;
    for e in entries {
        if !placed && e.id >= id {
            if let Some(v) = value {
                push(id, v);
            }
            placed = true;
        }
        if e.id != id {
            push(e.id, &page[e.range.clone()]);
        }
    }
    if !placed && let Some(v) = value {
        push(id, v);
    }
    out
}

/// [`with`] on an unparsed page. A page that does not parse is replaced
/// by one holding the new entry alone: its other entries cannot be read
/// anyway (every write produces a page that parses, and the WAL checks
/// its records), and refusing would stop every later write. It is logged,
/// naming the page, since entries are lost.
pub fn patched(key: &[u8], page: &[u8], id: u64, value: Option<&[u8]>) -> Vec<u8> {
    match parse(page) {
        Ok(entries) => with(page, &entries, id, value),
        Err(e) => {
            tracing::error!(
                "page {} is corrupt ({e}): its entries other than {id} are lost",
                key.escape_ascii()
            );
            with(&[], &[], id, value)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(page: &[u8]) -> Vec<(u64, Vec<u8>)> {
        parse(page)
            .unwrap()
            .into_iter()
            .map(|e| (e.id, page[e.range].to_vec()))
            .collect()
    }

    #[test]
    fn entries_stay_in_id_order_and_can_be_replaced_or_dropped() {
        let p = patched(b"t", &[], 5, Some(b"five"));
        let p = patched(b"t", &p, 2, Some(b"two"));
        let p = patched(b"t", &p, 9, Some(b""));
        assert_eq!(
            ids(&p),
            vec![(2, b"two".to_vec()), (5, b"five".to_vec()), (9, vec![])]
        );
        let p = patched(b"t", &p, 5, Some(b"FIVE!"));
        assert_eq!(find(&p, &parse(&p).unwrap(), 5), Some(&b"FIVE!"[..]));
        let p = patched(b"t", &p, 2, None);
        let p = patched(b"t", &p, 9, None);
        assert_eq!(ids(&p), vec![(5, b"FIVE!".to_vec())]);
        assert!(patched(b"t", &p, 5, None).is_empty());
        assert_eq!(patched(b"t", &p, 7, None), p, "dropping an absent entry");
    }

    #[test]
    fn a_cut_page_is_an_error() {
        let p = patched(b"t", &[], 3, Some(b"three"));
        let e = parse(&p[..p.len() - 1]).unwrap_err();
        assert!(e.contains("entry 3 is cut"), "{e}");
        assert!(parse(&p[..5]).unwrap_err().contains("header is cut"));
        // Patching it keeps the written entry alone (and logs the loss).
        let q = patched(b"t", &p[..p.len() - 1], 4, Some(b"four"));
        assert_eq!(ids(&q), vec![(4, b"four".to_vec())]);
    }
}
