//! Aligning two command sequences by their opcodes, for `mlx5 replay` and
//! `mlx5 diff`: a longest common subsequence, so that one command more or
//! less is one difference and not a cascade.
//!
//! Memory is linear in the traces' length: the common prefix and suffix are
//! matched first (two runs of one scenario share nearly everything), and
//! the rest is split with Hirschberg's divide and conquer (D. S.
//! Hirschberg, "A linear space algorithm for computing maximal common
//! subsequences", CACM 18(6), 1975), which keeps two rows of the LCS table
//! instead of all of it. Pieces of at most [`SMALL`] cells use the whole
//! table. Time stays O(n·m) in the worst case (two traces with nothing in
//! common) and near O(n + m) for two runs of one scenario.

/// One step of an alignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// `a[i]` and `b[j]` have the same opcode: compared field by field.
    Both(usize, usize),
    /// `a[i]` has no counterpart in `b`.
    OnlyA(usize),
    /// `b[j]` has no counterpart in `a`.
    OnlyB(usize),
}

/// Pieces with at most this many cells (n·m) are aligned with the whole
/// LCS table (4 bytes a cell: 256 KiB).
pub const SMALL: usize = 1 << 16;

/// A longest-common-subsequence alignment of `a` and `b`, in order.
pub fn align<T: PartialEq>(a: &[T], b: &[T]) -> Vec<Step> {
    let mut out = Vec::with_capacity(a.len().max(b.len()));
    // The common prefix and suffix: matching equal ends is always part of
    // some longest common subsequence.
    let pre = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let suf = a[pre..]
        .iter()
        .rev()
        .zip(b[pre..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    out.extend((0..pre).map(|i| Step::Both(i, i)));
    split(
        &a[pre..a.len() - suf],
        &b[pre..b.len() - suf],
        pre,
        pre,
        &mut out,
    );
    let (sa, sb) = (a.len() - suf, b.len() - suf);
    out.extend((0..suf).map(|k| Step::Both(sa + k, sb + k)));
    out
}

/// Hirschberg's step: `a` and `b` start at `ia` and `ib` in the whole.
fn split<T: PartialEq>(a: &[T], b: &[T], ia: usize, ib: usize, out: &mut Vec<Step>) {
    if a.is_empty() {
        out.extend((0..b.len()).map(|j| Step::OnlyB(ib + j)));
        return;
    }
    if b.is_empty() {
        out.extend((0..a.len()).map(|i| Step::OnlyA(ia + i)));
        return;
    }
    if a.len().saturating_mul(b.len()) <= SMALL || a.len() == 1 {
        table(a, b, ia, ib, out);
        return;
    }
    let mid = a.len() / 2;
    let fwd = row_forward(&a[..mid], b);
    let back = row_backward(&a[mid..], b);
    // The first best cut: where the halves' common lengths add up most.
    let cut = (0..=b.len())
        .max_by_key(|&j| (fwd[j] + back[j], std::cmp::Reverse(j)))
        .unwrap_or(0);
    split(&a[..mid], &b[..cut], ia, ib, out);
    split(&a[mid..], &b[cut..], ia + mid, ib + cut, out);
}

/// `row[j]` = LCS length of `a` and `b[..j]`, in two rows of memory.
fn row_forward<T: PartialEq>(a: &[T], b: &[T]) -> Vec<u32> {
    let mut prev = vec![0u32; b.len() + 1];
    let mut cur = vec![0u32; b.len() + 1];
    for x in a {
        for (j, y) in b.iter().enumerate() {
            cur[j + 1] = if x == y {
                prev[j] + 1
            } else {
                prev[j + 1].max(cur[j])
            };
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev
}

/// `row[j]` = LCS length of `a` and `b[j..]`, in two rows of memory.
fn row_backward<T: PartialEq>(a: &[T], b: &[T]) -> Vec<u32> {
    let m = b.len();
    let mut prev = vec![0u32; m + 1];
    let mut cur = vec![0u32; m + 1];
    for x in a.iter().rev() {
        cur[m] = 0;
        for j in (0..m).rev() {
            cur[j] = if *x == b[j] {
                prev[j + 1] + 1
            } else {
                prev[j].max(cur[j + 1])
            };
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev
}

/// The whole table for a small piece (at most [`SMALL`] cells, or one row
/// of `a`): equal heads matched, else the side whose skip keeps the longer
/// common rest, `a` first on a tie.
fn table<T: PartialEq>(a: &[T], b: &[T], ia: usize, ib: usize, out: &mut Vec<Step>) {
    let (n, m) = (a.len(), b.len());
    let w = m + 1;
    // lcs[i * w + j]: common length of a[i..] and b[j..].
    let mut lcs = vec![0u32; (n + 1) * w];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i * w + j] = if a[i] == b[j] {
                lcs[(i + 1) * w + j + 1] + 1
            } else {
                lcs[(i + 1) * w + j].max(lcs[i * w + j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    while i < n || j < m {
        if i < n && j < m && a[i] == b[j] {
            out.push(Step::Both(ia + i, ib + j));
            i += 1;
            j += 1;
        } else if j >= m || (i < n && lcs[(i + 1) * w + j] >= lcs[i * w + j + 1]) {
            out.push(Step::OnlyA(ia + i));
            i += 1;
        } else {
            out.push(Step::OnlyB(ib + j));
            j += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn common(s: &[Step]) -> usize {
        s.iter().filter(|x| matches!(x, Step::Both(..))).count()
    }

    /// The whole-table LCS length, for checking.
    fn lcs_len(a: &[u8], b: &[u8]) -> usize {
        row_forward(a, b)[b.len()] as usize
    }

    fn check(a: &[u8], b: &[u8]) {
        let s = align(a, b);
        let (mut i, mut j) = (0, 0);
        for st in &s {
            match *st {
                Step::Both(x, y) => {
                    assert_eq!((x, y), (i, j));
                    assert_eq!(a[x], b[y]);
                    i += 1;
                    j += 1;
                }
                Step::OnlyA(x) => {
                    assert_eq!(x, i);
                    i += 1;
                }
                Step::OnlyB(y) => {
                    assert_eq!(y, j);
                    j += 1;
                }
            }
        }
        assert_eq!((i, j), (a.len(), b.len()));
        assert_eq!(common(&s), lcs_len(a, b), "{a:?} {b:?}");
    }

    #[test]
    fn every_alignment_is_a_longest_common_subsequence() {
        check(b"", b"");
        check(b"abc", b"");
        check(b"", b"abc");
        check(b"abcbdab", b"bdcaba");
        check(b"xaxbxc", b"abc");
        // Pseudo-random sequences large enough for Hirschberg's split.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % 5) as u8
        };
        for (n, m) in [(300, 290), (700, 50), (1, 900), (400, 400)] {
            let a: Vec<u8> = (0..n).map(|_| next()).collect();
            let b: Vec<u8> = (0..m).map(|_| next()).collect();
            check(&a, &b);
        }
    }

    #[test]
    fn one_command_more_is_one_step_aside() {
        let a: Vec<u16> = (0..20_000).map(|i| (i % 7) as u16).collect();
        let mut b = a.clone();
        b.insert(10_000, 99);
        let s = align(&a, &b);
        assert_eq!(s.len(), 20_001);
        assert_eq!(s[10_000], Step::OnlyB(10_000));
    }
}
