//! A plain left-aligned text table; colors never affect the alignment.

use crate::sanitize::sanitize;
use crate::style::{Style, Tone};

pub struct Cell {
    text: String,
    tone: Tone,
}

impl Cell {
    pub fn plain(text: impl Into<String>) -> Cell {
        Cell::toned(text, Tone::Plain)
    }

    pub fn toned(text: impl Into<String>, tone: Tone) -> Cell {
        // One cell, one line: escape sequences and control characters
        // would break the layout (and drive the terminal), on any stream.
        let text = sanitize(&text.into())
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        Cell { text, tone }
    }
}

pub struct Table {
    headers: Vec<Cell>,
    rows: Vec<Vec<Cell>>,
}

impl Table {
    pub fn new(headers: &[&str]) -> Table {
        Table {
            headers: headers
                .iter()
                .map(|h| Cell::toned(*h, Tone::Bold))
                .collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<Cell>) {
        self.rows.push(cells);
    }

    pub fn render(&self, style: Style) -> String {
        let mut widths: Vec<usize> = Vec::new();
        for line in std::iter::once(&self.headers).chain(&self.rows) {
            for (i, cell) in line.iter().enumerate() {
                let w = cell.text.chars().count();
                match widths.get_mut(i) {
                    Some(max) => *max = (*max).max(w),
                    None => widths.push(w),
                }
            }
        }
        let mut out = String::new();
        for line in std::iter::once(&self.headers).chain(&self.rows) {
            for (i, cell) in line.iter().enumerate() {
                out.push_str(&style.paint(&cell.text, cell.tone));
                if i + 1 < line.len() {
                    let width = widths.get(i).copied().unwrap_or(0);
                    let pad = width - cell.text.chars().count() + 2;
                    out.extend(std::iter::repeat_n(' ', pad));
                }
            }
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligns_columns_without_trailing_spaces() {
        let mut t = Table::new(&["ID", "NAME"]);
        t.row(vec![Cell::plain("p1"), Cell::plain("a\nb")]);
        t.row(vec![Cell::plain("p100"), Cell::plain("x\x1b]0;title\x07")]);
        assert_eq!(t.render(Style::plain()), "ID    NAME\np1    a b\np100  x\n");
    }
}
