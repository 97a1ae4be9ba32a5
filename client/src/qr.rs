//! A QR code drawn with Unicode half blocks, two modules per character
//! row, for scanning off a terminal.

/// The code of `content`, or the content itself when it cannot be encoded.
pub fn render(content: &str) -> String {
    match qrcode::QrCode::new(content.as_bytes()) {
        Ok(code) => code
            .render::<qrcode::render::unicode::Dense1x2>()
            .dark_color(qrcode::render::unicode::Dense1x2::Light)
            .light_color(qrcode::render::unicode::Dense1x2::Dark)
            .quiet_zone(true)
            .build(),
        Err(_) => format!("(cannot draw a QR code; open this instead: {content})"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_url_becomes_rows_of_half_blocks() {
        let art = super::render("https://example.com/qr?id=abc");
        assert!(art.lines().count() > 10, "{art}");
        assert!(art.contains('█') || art.contains('▀') || art.contains('▄'));
    }
}
