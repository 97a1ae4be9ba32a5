//! `flyto-bench size`: the size of each release binary next to the
//! 40 MiB target, and where its debug info is (in it, in a separate
//! `<name>.debug` file, or nowhere). Sizes, not timings: the figures do
//! not depend on the machine's load.

use std::path::Path;

/// Each shipped binary's target size.
const TARGET_BYTES: u64 = 40 * 1024 * 1024;

/// Whether `path` still holds DWARF (a `.debug_line` or `.debug_info`
/// section name in its section-name table; cheap and good enough for a
/// report).
fn has_debug_info(path: &Path) -> bool {
    std::fs::read(path).is_ok_and(|bytes| {
        let has = |name: &[u8]| bytes.windows(name.len()).any(|w| w == name);
        has(b".debug_line\0") || has(b".debug_info\0")
    })
}

pub fn run() -> anyhow::Result<()> {
    let dir = flyto_tests::bin_dir();
    for name in ["flytod", "flytoctl"] {
        let path = dir.join(name);
        let size = std::fs::metadata(&path)
            .map_err(|e| anyhow::anyhow!("{}: {e}; build it first", path.display()))?
            .len();
        let debug = dir.join(format!("{name}.debug"));
        let where_debug = if has_debug_info(&path) {
            "in the binary (not stripped)".to_string()
        } else if debug.exists() {
            let d = std::fs::metadata(&debug).map(|m| m.len()).unwrap_or(0);
            format!("in {} ({:.1} MiB)", debug.display(), mib(d))
        } else {
            "none here (README \"Install\": how to keep it)".to_string()
        };
        println!(
            "size {name}: {:.1} MiB, target {:.0} MiB, ratio {:.2} ({}); debug info {where_debug}",
            mib(size),
            mib(TARGET_BYTES),
            size as f64 / TARGET_BYTES as f64,
            if size <= TARGET_BYTES { "ok" } else { "OVER" },
        );
    }
    Ok(())
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}
