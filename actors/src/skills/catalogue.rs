//! catalogue: what the system prompt says about skills — every valid
//! skill's name and description, within a budget. Past the budget the
//! longest descriptions are cut first (one common length for all, the
//! largest that fits), so the order is fixed and no name is ever dropped.

use super::SkillSet;

/// The catalogue's list never takes more than this many characters...
pub const MAX_CHARS: usize = 8000;
/// ...nor more than this share of the model's context window (in
/// characters, at about 4 characters a token).
pub const WINDOW_PERCENT: u64 = 2;
const CHARS_PER_TOKEN: u64 = 4;

/// The catalogue as the system prompt carries it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Catalogue {
    /// Empty when there is nothing to say.
    pub text: String,
    /// Descriptions were cut to fit the budget.
    pub shortened: bool,
    /// The list's budget in characters.
    pub budget: usize,
}

/// The budget for a model with `context_window` tokens (0: unknown).
pub fn budget(context_window: u64) -> usize {
    if context_window == 0 {
        return MAX_CHARS;
    }
    let chars = context_window * WINDOW_PERCENT / 100 * CHARS_PER_TOKEN;
    (chars as usize).min(MAX_CHARS)
}

fn line(name: &str, description: &str, cap: usize) -> String {
    if cap == 0 {
        return format!("- {name}\n");
    }
    let count = description.chars().count();
    if count <= cap {
        format!("- {name}: {description}\n")
    } else {
        let cut: String = description.chars().take(cap.saturating_sub(1)).collect();
        format!("- {name}: {}…\n", cut.trim_end())
    }
}

fn list(set: &SkillSet, cap: usize) -> String {
    set.skills
        .values()
        .map(|s| line(s.name(), &s.parsed.description, cap))
        .collect()
}

/// The catalogue of `set` for a model with `context_window` tokens.
pub fn catalogue(set: &SkillSet, context_window: u64) -> Catalogue {
    let budget = budget(context_window);
    let broken = set.broken.len();
    if set.skills.is_empty() && broken == 0 {
        return Catalogue {
            budget,
            ..Catalogue::default()
        };
    }
    let longest = set
        .skills
        .values()
        .map(|s| s.parsed.description.chars().count())
        .max()
        .unwrap_or(0);
    let mut entries = list(set, longest);
    let shortened = entries.chars().count() > budget;
    if shortened {
        // The largest common cap that fits; 0 (names only) if none does.
        let (mut lo, mut hi) = (0usize, longest);
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            if list(set, mid).chars().count() <= budget {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        entries = list(set, lo);
    }
    let mut text = String::from(
        "# Skills\nSkills are written procedures for particular tasks. When a task matches a skill's description, \
         call load_skill with its name before you start and follow what it says; it lists its files, which \
         load_skill(name, path) returns one at a time.\n",
    );
    if shortened {
        text.push_str("(Some descriptions below are shortened; load_skill shows a skill whole.)\n");
    }
    text.push_str(&entries);
    if broken > 0 {
        text.push_str(&format!(
            "Note: {broken} skill{} could not be loaded (a broken SKILL.md); the user can see which and why with `flytoctl skill_list --all`.\n",
            if broken == 1 { "" } else { "s" }
        ));
    }
    Catalogue {
        text,
        shortened,
        budget,
    }
}
