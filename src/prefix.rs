//! Source prefixes and prefix list files for the edge filters (docs/config.md
//! "Filters"): parsing only, no I/O. A leaf module: the configuration
//! validates inline prefixes with it, the filter compiler and the daemon parse
//! list files with it.
//!
//! A list file has one prefix per line (`192.0.2.0/24`, or an address alone
//! for a /32); `#` (and `;`, as in Spamhaus DROP) starts a comment; blank
//! lines are skipped; surrounding whitespace is ignored. IPv6 prefixes are
//! parsed and counted but not used yet (nilb balances IPv4 only, and XDP
//! passes IPv6 untouched). Anything else is an error with its line number.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// An IPv4 prefix with no host bits set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Prefix4 {
    /// The network address (host bits zero).
    pub addr: Ipv4Addr,
    /// Prefix length, 0-32.
    pub len: u8,
}

impl Prefix4 {
    /// The prefix of length `len` (0-32) of `addr`, host bits cleared.
    pub fn new(addr: Ipv4Addr, len: u8) -> Prefix4 {
        let len = len.min(32);
        Prefix4 {
            addr: Ipv4Addr::from(u32::from(addr) & mask(len)),
            len,
        }
    }

    /// First address, as a host-order integer.
    pub fn first(&self) -> u32 {
        u32::from(self.addr)
    }

    /// Last address, as a host-order integer.
    pub fn last(&self) -> u32 {
        self.first() | !mask(self.len)
    }

    /// Whether `a` lies in this prefix.
    pub fn contains(&self, a: Ipv4Addr) -> bool {
        u32::from(a) & mask(self.len) == self.first()
    }

    /// Whether `other` lies wholly in this prefix (or is it).
    pub fn covers(&self, other: &Prefix4) -> bool {
        other.len >= self.len && self.contains(other.addr)
    }
}

/// Host-order mask of a prefix length (0-32).
pub fn mask(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - len.min(32) as u32)
    }
}

impl fmt::Display for Prefix4 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// A prefix of either family as written in a list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourcePrefix {
    /// IPv4.
    V4(Prefix4),
    /// IPv6 (address with host bits cleared, length 0-128); not filtered yet.
    V6(Ipv6Addr, u8),
}

/// Why a prefix could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrefixError(pub String);

impl fmt::Display for PrefixError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for SourcePrefix {
    type Err = PrefixError;

    /// `ADDRESS` or `ADDRESS/LENGTH`, IPv4 or IPv6. Host bits must be zero
    /// (`192.0.2.1/24` is refused: which was meant, the /24 or the address?).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (a, l) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let len = |max: u8| -> Result<u8, PrefixError> {
            match l {
                None => Ok(max),
                Some(l) => match l.parse::<u8>() {
                    Ok(n) if n <= max && !l.starts_with('+') => Ok(n),
                    _ => Err(PrefixError(format!(
                        "`{s}`: the prefix length must be 0-{max}"
                    ))),
                },
            }
        };
        if let Ok(v4) = a.parse::<Ipv4Addr>() {
            let n = len(32)?;
            let p = Prefix4::new(v4, n);
            if p.addr != v4 {
                return Err(PrefixError(format!(
                    "`{s}` has host bits set (the /{n} is {p}; for the address alone write {v4})"
                )));
            }
            return Ok(SourcePrefix::V4(p));
        }
        if let Ok(v6) = a.parse::<Ipv6Addr>() {
            let n = len(128)?;
            let m = if n == 0 {
                0
            } else {
                u128::MAX << (128 - n as u32)
            };
            let net = Ipv6Addr::from(u128::from(v6) & m);
            if net != v6 {
                return Err(PrefixError(format!(
                    "`{s}` has host bits set (the /{n} is {net}/{n})"
                )));
            }
            return Ok(SourcePrefix::V6(net, n));
        }
        Err(PrefixError(format!(
            "`{s}` is not an IPv4 or IPv6 address or prefix"
        )))
    }
}

/// One bad line of a list file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub reason: String,
}

/// Largest list file read, bytes.
pub const MAX_LIST_BYTES: usize = 512 << 20;
/// Bad lines reported in full; the rest are counted.
pub const MAX_LINE_ERRORS: usize = 10;

/// The prefixes of a list file, in file order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParsedList {
    /// IPv4 prefixes with their 1-based line numbers.
    pub v4: Vec<(Prefix4, usize)>,
    /// IPv6 prefixes found (not filtered yet).
    pub v6: usize,
    /// Lines read (including comments and blank lines).
    pub lines: usize,
}

/// A list file that cannot be used: the first bad lines and how many there
/// are in all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListError {
    /// Up to [`MAX_LINE_ERRORS`] bad lines, in file order.
    pub errors: Vec<LineError>,
    /// Bad lines in all.
    pub total: usize,
}

impl fmt::Display for ListError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown: Vec<String> = self
            .errors
            .iter()
            .map(|e| format!("line {}: {}", e.line, e.reason))
            .collect();
        f.write_str(&shown.join("; "))?;
        if self.total > self.errors.len() {
            write!(f, "; and {} more bad lines", self.total - self.errors.len())?;
        }
        Ok(())
    }
}

/// Parse a list file's text: one prefix per line, `#` or `;` comments.
/// Every bad line counts; the file is usable only without any.
pub fn parse_list(text: &str) -> Result<ParsedList, ListError> {
    let mut out = ParsedList::default();
    let mut errors = Vec::new();
    let mut total = 0;
    // A byte-order mark is not part of the first line.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    for (i, raw) in text.lines().enumerate() {
        out.lines = i + 1;
        let content = raw.split(['#', ';']).next().unwrap_or_default().trim();
        if content.is_empty() {
            continue;
        }
        let word = match content.split_whitespace().collect::<Vec<_>>().as_slice() {
            [one] => *one,
            _ => {
                total += 1;
                if errors.len() < MAX_LINE_ERRORS {
                    errors.push(LineError {
                        line: i + 1,
                        reason: format!(
                            "`{content}`: one prefix per line (comments start with `#`)"
                        ),
                    });
                }
                continue;
            }
        };
        match word.parse::<SourcePrefix>() {
            Ok(SourcePrefix::V4(p)) => out.v4.push((p, i + 1)),
            Ok(SourcePrefix::V6(..)) => out.v6 += 1,
            Err(e) => {
                total += 1;
                if errors.len() < MAX_LINE_ERRORS {
                    errors.push(LineError {
                        line: i + 1,
                        reason: e.0,
                    });
                }
            }
        }
    }
    if total > 0 {
        return Err(ListError { errors, total });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Prefix4 {
        match s.parse::<SourcePrefix>().unwrap() {
            SourcePrefix::V4(p) => p,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn prefixes_parse_with_and_without_length() {
        assert_eq!(
            p("192.0.2.0/24"),
            Prefix4::new(Ipv4Addr::new(192, 0, 2, 0), 24)
        );
        assert_eq!(
            p("192.0.2.7"),
            Prefix4::new(Ipv4Addr::new(192, 0, 2, 7), 32)
        );
        assert_eq!(p("0.0.0.0/0").len, 0);
        assert_eq!(
            p("10.0.0.0/8").last(),
            u32::from(Ipv4Addr::new(10, 255, 255, 255))
        );
        assert!(p("10.0.0.0/8").covers(&p("10.1.0.0/16")));
        assert!(!p("10.1.0.0/16").covers(&p("10.0.0.0/8")));
        assert!(p("10.1.0.0/16").contains(Ipv4Addr::new(10, 1, 200, 3)));
        assert_eq!(
            "2001:db8::/32".parse::<SourcePrefix>().unwrap(),
            SourcePrefix::V6("2001:db8::".parse().unwrap(), 32)
        );
    }

    #[test]
    fn bad_prefixes_say_why() {
        for (s, want) in [
            ("192.0.2.1/24", "host bits set (the /24 is 192.0.2.0/24"),
            ("192.0.2.0/33", "prefix length must be 0-32"),
            ("192.0.2.0/", "prefix length must be 0-32"),
            ("192.0.2.0/+8", "prefix length must be 0-32"),
            ("192.0.2", "is not an IPv4 or IPv6 address"),
            ("example.com", "is not an IPv4 or IPv6 address"),
            ("2001:db8::1/32", "host bits set"),
            ("2001:db8::/129", "0-128"),
        ] {
            let e = s.parse::<SourcePrefix>().unwrap_err();
            assert!(e.0.contains(want), "{s}: {}", e.0);
        }
    }

    #[test]
    fn list_files_have_comments_blank_lines_and_ipv6() {
        let text = "\u{feff}# threat feed\n\n192.0.2.0/24 ; SBL123\n  198.51.100.7  # one host\n2001:db8::/32\n203.0.113.0/25\r\n";
        let l = parse_list(text).unwrap();
        assert_eq!(
            l.v4,
            vec![
                (p("192.0.2.0/24"), 3),
                (p("198.51.100.7/32"), 4),
                (p("203.0.113.0/25"), 6)
            ]
        );
        assert_eq!((l.v6, l.lines), (1, 6));
        assert_eq!(parse_list("").unwrap(), ParsedList::default());
    }

    #[test]
    fn bad_lines_are_reported_with_their_numbers() {
        let mut text = String::from("192.0.2.0/24\n192.0.2.1/24\n10.0.0.0/8 10.1.0.0/16\n");
        for _ in 0..20 {
            text += "nonsense\n";
        }
        let e = parse_list(&text).unwrap_err();
        assert_eq!(e.total, 22);
        assert_eq!(e.errors.len(), MAX_LINE_ERRORS);
        assert_eq!(e.errors[0].line, 2);
        assert!(
            e.errors[0].reason.contains("host bits"),
            "{}",
            e.errors[0].reason
        );
        assert_eq!(e.errors[1].line, 3);
        assert!(e.errors[1].reason.contains("one prefix per line"));
        assert_eq!(e.errors[2].line, 4);
        let shown = e.to_string();
        assert!(
            shown.starts_with("line 2: `192.0.2.1/24` has host bits set"),
            "{shown}"
        );
        assert!(shown.ends_with("and 12 more bad lines"), "{shown}");
    }
}
