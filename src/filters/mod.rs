//! Edge filters, compiled (docs/design.md "Edge filters"): the rules of a
//! configuration plus the contents of their list files become a
//! [`FilterSet`]: rule ids, the verdict of every prefix (longest prefix
//! decides, dry-run rules counted aside), the global scope's flat table and
//! long table exactly as the XDP program reads them, and each service's
//! prefixes for its trie. Pure: [`lists`] does the file reading; the data
//! plane copies the result into its maps.
//!
//! Semantics, per scope (global: the top-level deny rules; a service: its
//! allow rule and deny rules):
//! - the most specific prefix that matches the source decides; at equal
//!   prefixes deny beats allow, then the earlier rule;
//! - no prefix matches: a service with an allow rule drops the packet (the
//!   allow rule's drop), otherwise nothing happens;
//! - dry-run rules do not take part in that decision; each packet that a
//!   dry-run rule would drop were it live (the same decision with every
//!   rule live) is counted to it instead.

pub mod lists;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::Ipv4Addr;

use crate::abi_sys::{nilb_filter_bits as fb, nilb_limits};
use crate::config::{Config, PrefixRule, Rate, RatePer, RateRule};
use crate::prefix::{mask, Prefix4};
use crate::types::ServiceKey;
pub use lists::{load_lists, Lists};

/// Where a rule applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    /// Everything the XDP balancer sees (but cluster addresses).
    Global,
    /// One service's TCP and UDP packets.
    Service(ServiceKey),
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::Global => f.write_str("global"),
            Scope::Service(k) => write!(f, "{k}"),
        }
    }
}

/// What a rule does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RuleKind {
    /// Drop sources under its prefixes.
    Deny,
    /// Let only sources under its prefixes reach the service.
    Allow,
    /// Per-source token buckets.
    Rate,
}

impl RuleKind {
    /// `deny`, `allow` or `rate_limit`.
    pub fn as_str(&self) -> &'static str {
        match self {
            RuleKind::Deny => "deny",
            RuleKind::Allow => "allow",
            RuleKind::Rate => "rate_limit",
        }
    }

    /// The data plane's `enum nilb_filter_kind`.
    pub fn code(&self) -> u8 {
        use crate::abi_sys::nilb_filter_kind as k;
        (match self {
            RuleKind::Deny => k::NILB_FK_DENY,
            RuleKind::Allow => k::NILB_FK_ALLOW,
            RuleKind::Rate => k::NILB_FK_RATE,
        }) as u8
    }

    /// Inverse of [`RuleKind::code`].
    pub fn from_code(c: u8) -> Option<RuleKind> {
        use crate::abi_sys::nilb_filter_kind as k;
        match c as u32 {
            k::NILB_FK_DENY => Some(RuleKind::Deny),
            k::NILB_FK_ALLOW => Some(RuleKind::Allow),
            k::NILB_FK_RATE => Some(RuleKind::Rate),
            _ => None,
        }
    }
}

/// What identifies a rule across reloads (its id, and so its counters,
/// stay while this stays).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RuleIdent {
    /// Where it applies.
    pub scope: Scope,
    /// What it does.
    pub kind: RuleKind,
    /// Its name.
    pub name: String,
}

/// One source of a prefix rule's prefixes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleSource {
    /// `inline`, or the list file's path (resolved).
    pub origin: String,
    /// IPv4 prefixes read from it.
    pub prefixes: usize,
    /// IPv6 prefixes it holds, not used yet.
    pub ipv6_ignored: usize,
}

/// One rule of a compiled set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Rule id (1 ..), stable across reloads for the same [`RuleIdent`].
    pub id: u16,
    /// Scope, kind, name.
    pub ident: RuleIdent,
    /// Field path in the configuration.
    pub field: String,
    /// Counts, drops nothing.
    pub dry_run: bool,
    /// May cover cluster addresses (exempted in the data plane).
    pub covers_cluster: bool,
    /// Rate limits: per address or subnet, packets and SYNs.
    pub rate: Option<(RatePer, Option<Rate>, Option<Rate>)>,
    /// Prefix rules: where the prefixes came from.
    pub sources: Vec<RuleSource>,
}

impl Rule {
    /// IPv4 prefixes over all sources.
    pub fn prefixes(&self) -> usize {
        self.sources.iter().map(|s| s.prefixes).sum()
    }
}

/// The global scope's prefix table as the XDP program reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GlobalTable {
    /// One entry per /24 (`NILB_FV_FLAT_*`).
    pub flat: Vec<u16>,
    /// Verdict words the flat entries index (element 0 is 0).
    pub verdicts: Vec<u32>,
    /// Long table: buckets of (address, verdict) slots, one of the two
    /// fixed sizes (`2^NILB_FILTER_LONG_SMALL_BITS` or `_LARGE_BITS`).
    pub buckets: Vec<Bucket>,
    /// 32 - log2(buckets.len()).
    pub shift: u8,
    /// The large size (`NILB_F_FILTER_LONG_LARGE`).
    pub large: bool,
    /// Addresses in the long table.
    pub long_entries: usize,
}

/// A bucket of the long table: addresses as the XDP program loads them
/// (network order bytes as a native u32) and their verdict words; verdict
/// 0 is an empty slot.
pub type Bucket = [u32; 2 * BUCKET_SLOTS];

/// Slots per bucket of the long table.
pub const BUCKET_SLOTS: usize = nilb_limits::NILB_FILTER_BUCKET_SLOTS as usize;
/// Most addresses the long table may hold (prefixes longer than /24 are
/// expanded to their addresses): three quarters of the large table's
/// slots (filling beyond that may not find room for every address).
pub const MAX_LONG_ENTRIES: usize =
    (1 << nilb_limits::NILB_FILTER_LONG_LARGE_BITS) * BUCKET_SLOTS * 3 / 4;
/// Most prefixes over all services' lists (their trie is filled one
/// element at a time).
pub const MAX_SERVICE_PREFIXES: usize = 1 << 20;

impl GlobalTable {
    /// The verdict word for `addr`, found the way the XDP program finds it.
    pub fn lookup(&self, addr: Ipv4Addr) -> u32 {
        let entry = self.flat[(u32::from(addr) >> 8) as usize];
        if entry & fb::NILB_FV_FLAT_EXT as u16 != 0 {
            let a = wire_u32(addr);
            for b in self.candidate_buckets(a) {
                if let Some(v) = bucket_find(&self.buckets[b], a) {
                    return v;
                }
            }
        }
        flat_verdict(entry, |i| self.verdicts[i as usize])
    }

    /// The two buckets an address may be in.
    fn candidate_buckets(&self, a: u32) -> [usize; 2] {
        bucket_choices(a, self.shift)
    }

    /// Bytes of the flat table as the map holds them.
    pub fn flat_bytes(&self) -> Vec<u8> {
        self.flat.iter().flat_map(|e| e.to_ne_bytes()).collect()
    }

    /// Bytes of the long table as the map holds them.
    pub fn bucket_bytes(&self) -> Vec<u8> {
        self.buckets
            .iter()
            .flat_map(|b| b.iter().flat_map(|w| w.to_ne_bytes()))
            .collect()
    }
}

/// The verdict a flat-table entry gives (its own, or the one it indexes,
/// read with `verdict`), not looking at the long table.
pub fn flat_verdict(entry: u16, verdict: impl Fn(u16) -> u32) -> u32 {
    if entry & fb::NILB_FV_FLAT_DIRECT as u16 != 0 {
        return (entry as u32) & fb::NILB_FV_RULE_MASK;
    }
    match entry & fb::NILB_FV_FLAT_INDEX as u16 {
        0 => 0,
        i => verdict(i),
    }
}

/// The flat-table entry for a verdict word: the word itself when it is a
/// live drop and nothing else (`None` otherwise: it needs an index).
fn direct_entry(v: u32) -> Option<u16> {
    (v != 0 && v & !fb::NILB_FV_RULE_MASK == 0).then_some(v as u16 | fb::NILB_FV_FLAT_DIRECT as u16)
}

/// An address as the XDP program loads it from the packet: its network
/// order bytes read as a native-endian u32.
pub fn wire_u32(a: Ipv4Addr) -> u32 {
    u32::from_ne_bytes(a.octets())
}

fn bucket_choices(a: u32, shift: u8) -> [usize; 2] {
    let s = shift.min(31) as u32;
    [
        (a.wrapping_mul(fb::NILB_FH_MUL1) >> s) as usize,
        (a.wrapping_mul(fb::NILB_FH_MUL2) >> s) as usize,
    ]
}

fn bucket_find(b: &Bucket, a: u32) -> Option<u32> {
    (0..BUCKET_SLOTS)
        .find(|&i| b[i] == a && b[BUCKET_SLOTS + i] != 0)
        .map(|i| b[BUCKET_SLOTS + i])
}

/// One service's filters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceScope {
    /// Verdict when no prefix matches (an allow rule drops the rest).
    pub no_match: u32,
    /// Every distinct prefix of its rules with its verdict (the trie's
    /// entries), sorted by (address, length).
    pub entries: Vec<(Prefix4, u32)>,
    /// Rate-limit rule ids, in order.
    pub rates: Vec<u16>,
}

/// A verdict word decoded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// The live rule that drops the source.
    pub drop: Option<u16>,
    /// The dry-run rule that would drop it.
    pub dry: Option<u16>,
    /// The dropping rule covers cluster addresses (exempted at run time).
    pub drop_covers_cluster: bool,
    /// The same for the dry-run rule.
    pub dry_covers_cluster: bool,
}

impl Verdict {
    /// Decode a verdict word.
    pub fn decode(v: u32) -> Verdict {
        let rule = |w: u32| {
            let id = (w & fb::NILB_FV_RULE_MASK) as u16;
            (id != 0).then_some(id)
        };
        let dry = v >> fb::NILB_FV_DRY_SHIFT;
        Verdict {
            drop: rule(v),
            dry: rule(dry),
            drop_covers_cluster: v & fb::NILB_FV_COVERS_CLUSTER != 0,
            dry_covers_cluster: dry & fb::NILB_FV_COVERS_CLUSTER != 0,
        }
    }

    /// Encode as a verdict word.
    pub fn encode(&self) -> u32 {
        let part = |id: Option<u16>, covers: bool| match id {
            None => 0,
            Some(id) => {
                (id as u32 & fb::NILB_FV_RULE_MASK)
                    | if covers {
                        fb::NILB_FV_COVERS_CLUSTER
                    } else {
                        0
                    }
            }
        };
        part(self.drop, self.drop_covers_cluster)
            | part(self.dry, self.dry_covers_cluster) << fb::NILB_FV_DRY_SHIFT
    }
}

/// What the prefix lists of one scope decide for one source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The most specific prefix that matched, if any.
    pub matched: Option<Prefix4>,
    /// The verdict.
    pub verdict: Verdict,
}

/// A compiled filter configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilterSet {
    /// Every rule, by id.
    pub rules: Vec<Rule>,
    /// The global prefix table (None: no global deny rule has a prefix).
    pub global: Option<GlobalTable>,
    /// Every distinct global prefix with its verdict, sorted by (address,
    /// length): what [`FilterSet::decide`] reads.
    pub global_entries: Vec<(Prefix4, u32)>,
    /// Global rate-limit rule ids, in order.
    pub global_rates: Vec<u16>,
    /// Services with filters.
    pub services: BTreeMap<ServiceKey, ServiceScope>,
    /// `filters.rate_limit_sources`.
    pub rate_limit_sources: u32,
    /// Digest of the inputs (rules, ids and list contents): equal digests,
    /// equal sets.
    pub digest: u64,
}

impl Default for FilterSet {
    fn default() -> Self {
        FilterSet {
            rules: Vec::new(),
            global: None,
            global_entries: Vec::new(),
            global_rates: Vec::new(),
            services: BTreeMap::new(),
            rate_limit_sources: crate::config::DEFAULT_RATE_LIMIT_SOURCES,
            digest: 0,
        }
    }
}

/// A compile that cannot be done (limits).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompileError(pub String);

impl fmt::Display for CompileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CompileError {}

/// A prefix entry of one rule in a scope, before the decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    id: u16,
    deny: bool,
    dry: bool,
    covers: bool,
    /// Position of the rule in its scope (earlier wins ties).
    order: u16,
}

impl Entry {
    /// The better of two entries for the same prefix: deny over allow, then
    /// (`live_first`) live over dry run, then the earlier rule.
    fn better(a: Entry, b: Entry, live_first: bool) -> Entry {
        let key = |e: &Entry| (!e.deny, live_first && e.dry, e.order);
        if key(&b) < key(&a) {
            b
        } else {
            a
        }
    }
}

/// A scope's rules as entries, and its allow rule (the no-match default).
struct ScopeInput {
    entries: Vec<(Prefix4, Entry)>,
    allow: Option<Entry>,
}

impl ScopeInput {
    /// The verdict for a source whose deepest live match is `live` and
    /// deepest match of any rule is `all`.
    fn verdict(&self, live: Option<Entry>, all: Option<Entry>) -> Verdict {
        let live_allow = self.allow.filter(|a| !a.dry);
        // The live decision: a live deny drops; a live allow match lets
        // through; no match drops when there is a live allow rule.
        let drop = match live {
            Some(e) if e.deny => Some(e),
            Some(_) => None,
            None => live_allow,
        };
        // With every rule live: the same, counted for a dry-run rule.
        let would = match all {
            Some(e) if e.deny => Some(e),
            Some(_) => None,
            None => self.allow,
        };
        let dry = would.filter(|e| e.dry);
        Verdict {
            drop: drop.map(|e| e.id),
            dry: dry.map(|e| e.id),
            drop_covers_cluster: drop.is_some_and(|e| e.covers),
            dry_covers_cluster: dry.is_some_and(|e| e.covers),
        }
    }

    /// Every distinct prefix with its verdict, sorted by (address,
    /// length): the deepest live and any-rule match of each, inherited
    /// from the prefixes that cover it. Also the no-match verdict.
    fn resolve(mut self) -> (Vec<(Prefix4, u32)>, u32) {
        self.entries
            .sort_unstable_by_key(|(p, e)| (p.first(), p.len, e.order));
        // Distinct prefixes with their own best live and any-rule entry.
        let mut nodes: Vec<(Prefix4, Option<Entry>, Option<Entry>)> = Vec::new();
        for (p, e) in &self.entries {
            let live = (!e.dry).then_some(*e);
            match nodes.last_mut() {
                Some((q, l, a)) if q == p => {
                    *l = match (*l, live) {
                        (Some(x), Some(y)) => Some(Entry::better(x, y, false)),
                        (x, y) => x.or(y),
                    };
                    *a = Some(Entry::better(a.expect("set"), *e, true));
                }
                _ => nodes.push((*p, live, Some(*e))),
            }
        }
        let no_match = self.verdict(None, None).encode();
        // Sorted by (first, length), the prefixes come in pre-order of
        // their containment tree: a stack of covering prefixes gives each
        // its inherited matches.
        let mut stack: Vec<(Prefix4, Option<Entry>, Option<Entry>)> = Vec::new();
        let mut out = Vec::with_capacity(nodes.len());
        for (p, live, all) in nodes {
            while stack.last().is_some_and(|(q, _, _)| !q.covers(&p)) {
                stack.pop();
            }
            let (pl, pa) = stack.last().map_or((None, None), |(_, l, a)| (*l, *a));
            let (l, a) = (live.or(pl), all.or(pa));
            out.push((p, self.verdict(l, a).encode()));
            stack.push((p, l, a));
        }
        (out, no_match)
    }
}

/// Longest-prefix match in entries sorted by (address, length).
fn longest_match(entries: &[(Prefix4, u32)], addr: Ipv4Addr) -> Option<(Prefix4, u32)> {
    (0..=32u8).rev().find_map(|len| {
        let p = Prefix4::new(addr, len);
        entries
            .binary_search_by_key(&(p.first(), p.len), |(q, _)| (q.first(), q.len))
            .ok()
            .map(|i| entries[i])
    })
}

/// The global table for resolved entries (sorted by address and length).
fn global_table(entries: &[(Prefix4, u32)]) -> Result<GlobalTable, CompileError> {
    let mut flat = vec![0u16; 1 << 24];
    let mut verdicts = vec![0u32];
    let mut index: HashMap<u32, u16> = HashMap::from([(0, 0)]);
    let max_verdicts = nilb_limits::NILB_FILTER_VERDICTS as usize;
    // Pre-order: a prefix is painted before the prefixes inside it.
    let mut long: Vec<(u32, u32)> = Vec::new();
    for &(p, v) in entries {
        if p.len <= 24 {
            let i = match direct_entry(v).or_else(|| index.get(&v).copied()) {
                Some(i) => i,
                None => {
                    if verdicts.len() >= max_verdicts {
                        return Err(CompileError(format!(
                            "the global lists need more than {max_verdicts} distinct verdicts (combinations of rules)"
                        )));
                    }
                    let i = verdicts.len() as u16;
                    verdicts.push(v);
                    index.insert(v, i);
                    i
                }
            };
            let (a, b) = ((p.first() >> 8) as usize, (p.last() >> 8) as usize);
            flat[a..=b].fill(i);
        } else {
            let n = 1u64 << (32 - p.len);
            if long.len() as u64 + n > MAX_LONG_ENTRIES as u64 {
                return Err(CompileError(format!(
                    "prefixes longer than /24 in the global lists expand to more than {MAX_LONG_ENTRIES} addresses"
                )));
            }
            long.extend((p.first()..=p.last()).map(|a| (a, v)));
        }
    }
    // Deeper prefixes came later: the last entry for an address wins.
    let mut last: HashMap<u32, u32> = HashMap::with_capacity(long.len());
    for (a, v) in long {
        last.insert(a, v);
    }
    let mut long: Vec<(u32, u32)> = last.into_iter().filter(|(_, v)| *v != 0).collect();
    long.sort_unstable();
    for (a, _) in &long {
        flat[(*a >> 8) as usize] |= fb::NILB_FV_FLAT_EXT as u16;
    }
    let (buckets, large) = if long.is_empty() {
        (Vec::new(), false)
    } else if let Some(b) = fill_buckets(&long, nilb_limits::NILB_FILTER_LONG_SMALL_BITS) {
        (b, false)
    } else if let Some(b) = fill_buckets(&long, nilb_limits::NILB_FILTER_LONG_LARGE_BITS) {
        (b, true)
    } else {
        return Err(CompileError(format!(
            "the {} addresses of prefixes longer than /24 in the global lists do not fit the long table",
            long.len()
        )));
    };
    let bits = if large {
        nilb_limits::NILB_FILTER_LONG_LARGE_BITS
    } else {
        nilb_limits::NILB_FILTER_LONG_SMALL_BITS
    };
    Ok(GlobalTable {
        flat,
        verdicts,
        buckets,
        shift: (32 - bits) as u8,
        large,
        long_entries: long.len(),
    })
}

/// Buckets for `long` ((host-order address, verdict), sorted) in a table
/// of 2^`bits` buckets: each address in its first bucket, or in its second
/// when the first is full, or (one cuckoo step) in its first after an
/// address there moved to its own other bucket. None if they do not fit.
fn fill_buckets(long: &[(u32, u32)], bits: u32) -> Option<Vec<Bucket>> {
    let n = 1usize << bits;
    if long.len() > n * BUCKET_SLOTS * 3 / 4 {
        return None;
    }
    let shift = (32 - bits) as u8;
    let mut buckets = vec![[0u32; 2 * BUCKET_SLOTS]; n];
    let mut fill = vec![0u8; n];
    let put = |buckets: &mut Vec<Bucket>, fill: &mut Vec<u8>, b: usize, w: u32, v: u32| {
        let f = fill[b] as usize;
        buckets[b][f] = w;
        buckets[b][BUCKET_SLOTS + f] = v;
        fill[b] += 1;
    };
    let ok = long.iter().all(|&(a, v)| {
        let w = wire_u32(Ipv4Addr::from(a));
        let [b1, b2] = bucket_choices(w, shift);
        for b in [b1, b2] {
            if (fill[b] as usize) < BUCKET_SLOTS {
                put(&mut buckets, &mut fill, b, w, v);
                return true;
            }
        }
        // Both full: move an address of the first bucket to its other
        // bucket if that has room, and take its slot.
        for i in 0..BUCKET_SLOTS {
            let (x, xv) = (buckets[b1][i], buckets[b1][BUCKET_SLOTS + i]);
            let [x1, x2] = bucket_choices(x, shift);
            let alt = if x1 == b1 { x2 } else { x1 };
            if alt != b1 && (fill[alt] as usize) < BUCKET_SLOTS {
                put(&mut buckets, &mut fill, alt, x, xv);
                buckets[b1][i] = w;
                buckets[b1][BUCKET_SLOTS + i] = v;
                return true;
            }
        }
        false
    });
    ok.then_some(buckets)
}

/// A small, fast 64-bit digest (not cryptographic): equal inputs, equal
/// digests; different inputs differ with overwhelming likelihood.
#[derive(Clone, Copy, Debug)]
pub struct Digest(u64);

impl Default for Digest {
    fn default() -> Self {
        Digest(0x6e69_6c62_f117_e125)
    }
}

impl Digest {
    /// Mix in bytes.
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        let mut chunks = b.chunks_exact(8);
        for c in &mut chunks {
            self.word(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let mut rest = [0u8; 8];
        rest[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
        self.word(u64::from_le_bytes(rest) ^ ((b.len() as u64) << 56));
        self
    }

    /// Mix in one word.
    pub fn word(&mut self, w: u64) -> &mut Self {
        self.0 = (self.0 ^ w)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .rotate_left(29)
            .wrapping_add(0x632B_E59B_D9B4_E019);
        self
    }

    /// Mix in anything with a Debug form (small values: configuration).
    pub fn debug(&mut self, v: &impl fmt::Debug) -> &mut Self {
        self.bytes(format!("{v:?}").as_bytes())
    }

    /// The digest.
    pub fn finish(&self) -> u64 {
        self.0
    }
}

/// The rules of a configuration in id order of assignment: (ident, field,
/// dry run, covers cluster, rate, prefix rule).
fn config_rules(config: &Config) -> Vec<(RuleIdent, Option<&PrefixRule>, Option<&RateRule>)> {
    let mut out = Vec::new();
    let ident = |scope: Scope, kind: RuleKind, name: &str| RuleIdent {
        scope,
        kind,
        name: name.to_string(),
    };
    for r in &config.filters.deny {
        out.push((ident(Scope::Global, RuleKind::Deny, &r.name), Some(r), None));
    }
    for r in &config.filters.rate_limit {
        out.push((ident(Scope::Global, RuleKind::Rate, &r.name), None, Some(r)));
    }
    for s in &config.services {
        let scope = Scope::Service(s.key());
        if let Some(r) = &s.filters.allow {
            out.push((ident(scope, RuleKind::Allow, &r.name), Some(r), None));
        }
        for r in &s.filters.deny {
            out.push((ident(scope, RuleKind::Deny, &r.name), Some(r), None));
        }
        for r in &s.filters.rate_limit {
            out.push((ident(scope, RuleKind::Rate, &r.name), None, Some(r)));
        }
    }
    out
}

/// Digest of what a compile reads: every rule (in order, with its id) and
/// the digest of every list file's contents.
fn input_digest(config: &Config, lists: &Lists, ids: &[u16]) -> u64 {
    let mut d = Digest::default();
    d.word(config.filters.rate_limit_sources as u64);
    for ((ident, prefix_rule, rate_rule), id) in config_rules(config).into_iter().zip(ids) {
        d.debug(&ident).word(*id as u64);
        if let Some(r) = rate_rule {
            d.debug(r);
        }
        if let Some(r) = prefix_rule {
            d.debug(&r.name)
                .debug(&r.prefixes.iter().map(|(p, _)| *p).collect::<Vec<_>>())
                .word(r.dry_run as u64)
                .word(r.covers_cluster as u64);
            for f in &r.files {
                d.debug(&f.field)
                    .word(lists.get(&f.field).map_or(0, |l| l.digest));
            }
        }
    }
    d.finish()
}

/// Rule ids for `idents`: the previous id of each ident that had one; new
/// ones get the lowest id nobody had before (so a removed rule's counters
/// are never inherited), and only when those run out, a removed rule's id.
pub fn assign_ids(
    idents: &[RuleIdent],
    prev: &BTreeMap<RuleIdent, u16>,
) -> Result<Vec<u16>, CompileError> {
    let max = (nilb_limits::NILB_MAX_FILTER_RULES - 1) as u16;
    let kept: std::collections::BTreeSet<u16> =
        idents.iter().filter_map(|i| prev.get(i).copied()).collect();
    let taken: std::collections::BTreeSet<u16> = prev.values().copied().collect();
    let mut fresh = (1..=max).filter(|i| !taken.contains(i));
    let mut reuse = taken
        .difference(&kept)
        .copied()
        .collect::<Vec<_>>()
        .into_iter();
    idents
        .iter()
        .map(|i| match prev.get(i) {
            Some(&id) => Ok(id),
            None => fresh
                .next()
                .or_else(|| reuse.next())
                .ok_or_else(|| CompileError(format!("more than {max} filter rules"))),
        })
        .collect()
}

impl FilterSet {
    /// Compile `config`'s filters with the list contents `lists` (read by
    /// [`load_lists`]); `prev`: the rule ids in use (of the running set or
    /// of an adopted data plane), kept for rules that are still there.
    pub fn compile(
        config: &Config,
        lists: &Lists,
        prev: &BTreeMap<RuleIdent, u16>,
    ) -> Result<FilterSet, CompileError> {
        let rules_in = config_rules(config);
        let idents: Vec<RuleIdent> = rules_in.iter().map(|(i, _, _)| i.clone()).collect();
        let ids = assign_ids(&idents, prev)?;
        let digest = input_digest(config, lists, &ids);
        let mut rules = Vec::new();
        let mut scopes: BTreeMap<Scope, ScopeInput> = BTreeMap::new();
        let mut rates: BTreeMap<Scope, Vec<u16>> = BTreeMap::new();
        let mut service_prefixes = 0usize;
        for (((ident, prefix_rule, rate_rule), id), order) in
            rules_in.into_iter().zip(ids).zip(0u16..)
        {
            let scope = ident.scope;
            if let Some(r) = rate_rule {
                rates.entry(scope).or_default().push(id);
                rules.push(Rule {
                    id,
                    field: r.field.clone(),
                    dry_run: r.dry_run,
                    covers_cluster: false,
                    rate: Some((r.per, r.packets, r.syns)),
                    sources: Vec::new(),
                    ident,
                });
                continue;
            }
            let Some(r) = prefix_rule else { continue };
            let e = Entry {
                id,
                deny: ident.kind == RuleKind::Deny,
                dry: r.dry_run,
                covers: r.covers_cluster,
                order,
            };
            let si = scopes.entry(scope).or_insert_with(|| ScopeInput {
                entries: Vec::new(),
                allow: None,
            });
            if ident.kind == RuleKind::Allow {
                si.allow = Some(e);
            }
            let mut sources = Vec::new();
            if !r.prefixes.is_empty() {
                sources.push(RuleSource {
                    origin: "inline".into(),
                    prefixes: r.prefixes.len(),
                    ipv6_ignored: 0,
                });
                si.entries.extend(r.prefixes.iter().map(|(p, _)| (*p, e)));
            }
            for f in &r.files {
                let Some(l) = lists.get(&f.field) else {
                    return Err(CompileError(format!(
                        "{}: list {} was not read",
                        f.field,
                        f.path.display()
                    )));
                };
                sources.push(RuleSource {
                    origin: l.path.display().to_string(),
                    prefixes: l.parsed.v4.len(),
                    ipv6_ignored: l.parsed.v6,
                });
                si.entries.extend(l.parsed.v4.iter().map(|(p, _)| (*p, e)));
            }
            if scope != Scope::Global {
                service_prefixes += sources.iter().map(|s| s.prefixes).sum::<usize>();
            }
            rules.push(Rule {
                id,
                field: r.field.clone(),
                dry_run: r.dry_run,
                covers_cluster: r.covers_cluster,
                rate: None,
                sources,
                ident,
            });
        }
        if service_prefixes > MAX_SERVICE_PREFIXES {
            return Err(CompileError(format!(
                "services' lists hold {service_prefixes} prefixes; at most {MAX_SERVICE_PREFIXES} (large lists belong in the top-level deny rules)"
            )));
        }
        rules.sort_by_key(|r| r.id);
        let mut set = FilterSet {
            rules,
            global_rates: rates.remove(&Scope::Global).unwrap_or_default(),
            rate_limit_sources: config.filters.rate_limit_sources,
            ..FilterSet::default()
        };
        for (scope, input) in scopes {
            let (entries, no_match) = input.resolve();
            match scope {
                Scope::Global => {
                    if !entries.is_empty() {
                        set.global = Some(global_table(&entries)?);
                    }
                    set.global_entries = entries;
                }
                Scope::Service(key) => {
                    set.services.insert(
                        key,
                        ServiceScope {
                            no_match,
                            entries,
                            rates: Vec::new(),
                        },
                    );
                }
            }
        }
        for (scope, ids) in rates {
            if let Scope::Service(key) = scope {
                set.services
                    .entry(key)
                    .or_insert_with(|| ServiceScope {
                        no_match: 0,
                        entries: Vec::new(),
                        rates: Vec::new(),
                    })
                    .rates = ids;
            }
        }
        set.digest = digest;
        Ok(set)
    }

    /// The digest [`FilterSet::compile`] would give its result, without
    /// compiling: equal to a running set's digest means nothing changed
    /// (the same rules, ids and list contents).
    pub fn digest_of(
        config: &Config,
        lists: &Lists,
        prev: &BTreeMap<RuleIdent, u16>,
    ) -> Result<u64, CompileError> {
        let idents: Vec<RuleIdent> = config_rules(config)
            .into_iter()
            .map(|(i, _, _)| i)
            .collect();
        let ids = assign_ids(&idents, prev)?;
        Ok(input_digest(config, lists, &ids))
    }

    /// Rule ids by identity (to keep them on the next compile).
    pub fn ids(&self) -> BTreeMap<RuleIdent, u16> {
        self.rules.iter().map(|r| (r.ident.clone(), r.id)).collect()
    }

    /// The rule with this id.
    pub fn rule(&self, id: u16) -> Option<&Rule> {
        self.rules
            .binary_search_by_key(&id, |r| r.id)
            .ok()
            .map(|i| &self.rules[i])
    }

    /// Whether there is any rule at all.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// IPv4 prefixes over all rules.
    pub fn prefixes(&self) -> usize {
        self.rules.iter().map(Rule::prefixes).sum()
    }

    /// What the prefix lists of the global scope (`service` None) or of a
    /// service decide for `addr` (longest prefix; no match: the service's
    /// allow default).
    pub fn decide(&self, service: Option<&ServiceKey>, addr: Ipv4Addr) -> Decision {
        let (entries, no_match) = match service {
            None => (&self.global_entries[..], 0),
            Some(k) => match self.services.get(k) {
                Some(s) => (&s.entries[..], s.no_match),
                None => (&[][..], 0),
            },
        };
        match longest_match(entries, addr) {
            Some((p, v)) => Decision {
                matched: Some(p),
                verdict: Verdict::decode(v),
            },
            None => Decision {
                matched: None,
                verdict: Verdict::decode(no_match),
            },
        }
    }

    /// Rate-limit rules that apply to a scope, in order.
    pub fn rates(&self, service: Option<&ServiceKey>) -> &[u16] {
        match service {
            None => &self.global_rates,
            Some(k) => self.services.get(k).map_or(&[][..], |s| &s.rates[..]),
        }
    }
}

/// Data-plane parameters of a rate: (interval, tolerance) in ns, GCRA: a
/// token bucket of `burst` tokens refilled at `per_second`.
pub fn gcra(rate: &Rate) -> (u64, u64) {
    let interval = (1_000_000_000 / rate.per_second).max(1);
    (interval, interval.saturating_mul(rate.burst - 1))
}

/// The network-order mask of a rate limit's key.
pub fn rate_mask(per: RatePer) -> u32 {
    let len = match per {
        RatePer::Address => 32,
        RatePer::Subnet => 24,
    };
    u32::from_ne_bytes(mask(len).to_be_bytes())
}
