//! Names the user may have mistyped: the closest candidates by edit
//! distance, for "did you mean" hints.

/// Levenshtein distance (ASCII, case-insensitive, `-` = `_`).
pub fn distance(a: &str, b: &str) -> usize {
    let norm = |s: &str| -> Vec<u8> {
        s.bytes()
            .map(|c| {
                if c == b'-' {
                    b'_'
                } else {
                    c.to_ascii_lowercase()
                }
            })
            .collect()
    };
    let (a, b) = (norm(a), norm(b));
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The candidates closest to `word` (at most a third of its length away),
/// nearest first, at most `n`.
pub fn suggest<'a>(word: &str, cands: impl Iterator<Item = &'a str>, n: usize) -> Vec<String> {
    // No name is that long: the edit distance to a huge token (it costs
    // len × len) is never computed.
    if word.len() > 128 {
        return Vec::new();
    }
    let max = (word.len() / 3).max(2);
    let mut v: Vec<(usize, &str)> = cands
        .filter(|c| c.len().abs_diff(word.len()) <= max)
        .map(|c| (distance(word, c), c))
        .filter(|(d, _)| *d <= max)
        .collect();
    v.sort();
    v.into_iter().take(n).map(|(_, c)| c.to_string()).collect()
}
