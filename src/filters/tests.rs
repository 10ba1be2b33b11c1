use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use super::*;
use crate::config::Config;
use crate::prefix::SourcePrefix;

fn cfg(filters: &str, service_filters: &str) -> Config {
    let y = format!(
        "version: 1\ncluster: {{balancers: [10.0.0.11]}}\nservices:\n  - name: web\n    vip: 10.0.0.100\n    port: 80\n    protocol: tcp\n    backends: [{{dip: 10.0.0.12}}]\n{service_filters}{filters}"
    );
    Config::parse(&y).unwrap_or_else(|e| panic!("{e}\n{y}"))
}

fn compile(c: &Config) -> FilterSet {
    FilterSet::compile(c, &Lists::new(), &BTreeMap::new()).unwrap()
}

fn a(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

fn p(s: &str) -> Prefix4 {
    match s.parse::<SourcePrefix>().unwrap() {
        SourcePrefix::V4(p) => p,
        other => panic!("{other:?}"),
    }
}

fn id(set: &FilterSet, name: &str) -> u16 {
    set.rules
        .iter()
        .find(|r| r.ident.name == name)
        .unwrap_or_else(|| panic!("no rule {name}"))
        .id
}

/// (dropping rule name, dry-run rule name) for a source.
fn names(
    set: &FilterSet,
    svc: Option<&ServiceKey>,
    addr: &str,
) -> (Option<String>, Option<String>) {
    let d = set.decide(svc, a(addr));
    let n = |i: Option<u16>| i.map(|i| set.rule(i).unwrap().ident.name.clone());
    (n(d.verdict.drop), n(d.verdict.dry))
}

fn s(x: &str) -> Option<String> {
    Some(x.to_string())
}

#[test]
fn verdict_words_round_trip() {
    for v in [
        Verdict::default(),
        Verdict {
            drop: Some(7),
            ..Verdict::default()
        },
        Verdict {
            drop: Some(4095),
            dry: Some(1),
            drop_covers_cluster: true,
            dry_covers_cluster: false,
        },
        Verdict {
            drop: None,
            dry: Some(300),
            drop_covers_cluster: false,
            dry_covers_cluster: true,
        },
    ] {
        assert_eq!(Verdict::decode(v.encode()), v);
    }
    assert_eq!(Verdict::default().encode(), 0);
}

#[test]
fn the_longest_prefix_decides_and_ties_go_to_the_earlier_rule() {
    let c = cfg(
        "filters:\n  deny:\n    - {name: wide, prefixes: [198.0.0.0/8]}\n    - {name: mid, prefixes: [198.51.0.0/16, 203.0.113.0/24]}\n    - {name: host, prefixes: [198.51.100.7, 203.0.113.0/24]}\n",
        "",
    );
    let set = compile(&c);
    assert_eq!(names(&set, None, "198.1.2.3"), (s("wide"), None));
    assert_eq!(names(&set, None, "198.51.7.7"), (s("mid"), None));
    assert_eq!(names(&set, None, "198.51.100.7"), (s("host"), None));
    assert_eq!(names(&set, None, "198.51.100.8"), (s("mid"), None));
    // 203.0.113.0/24 is in both `mid` and `host`: the earlier rule counts.
    assert_eq!(names(&set, None, "203.0.113.9"), (s("mid"), None));
    assert_eq!(names(&set, None, "192.0.2.1"), (None, None));
    let d = set.decide(None, a("198.51.100.7"));
    assert_eq!(d.matched, Some(p("198.51.100.7/32")));
    // The table the XDP program reads agrees.
    let g = set.global.as_ref().unwrap();
    for addr in [
        "198.1.2.3",
        "198.51.7.7",
        "198.51.100.7",
        "198.51.100.8",
        "203.0.113.9",
        "192.0.2.1",
    ] {
        assert_eq!(
            g.lookup(a(addr)),
            set.decide(None, a(addr)).verdict.encode(),
            "{addr}"
        );
    }
    assert_eq!(g.long_entries, 1);
}

#[test]
fn allow_and_deny_of_a_service_interplay_by_prefix_length() {
    let c = cfg(
        "",
        "    filters:\n      allow: {name: partners, prefixes: [10.0.0.0/8, 10.66.1.0/24, 192.0.2.0/24]}\n      deny:\n        - {name: bad, prefixes: [10.66.0.0/16, 192.0.2.0/24]}\n",
    );
    let set = compile(&c);
    let k = c.services[0].key();
    let svc = Some(&k);
    // listed by allow: passes
    assert_eq!(names(&set, svc, "10.1.2.3"), (None, None));
    // deny more specific than allow: dropped by deny
    assert_eq!(names(&set, svc, "10.66.2.3"), (s("bad"), None));
    // allow more specific again: passes
    assert_eq!(names(&set, svc, "10.66.1.5"), (None, None));
    // the same prefix in both: deny wins
    assert_eq!(names(&set, svc, "192.0.2.9"), (s("bad"), None));
    // not listed: dropped by the allow rule
    assert_eq!(names(&set, svc, "198.51.100.1"), (s("partners"), None));
    assert_eq!(set.decide(svc, a("198.51.100.1")).matched, None);
    // the global scope is not touched by service rules
    assert_eq!(names(&set, None, "10.66.2.3"), (None, None));
    assert!(set.global.is_none());
}

#[test]
fn dry_run_rules_count_aside_and_never_change_what_is_dropped() {
    let c = cfg(
        "filters:\n  deny:\n    - {name: live, prefixes: [198.51.0.0/16]}\n    - {name: try, prefixes: [198.51.100.0/24, 203.0.113.0/24], dry_run: true}\n",
        "    filters:\n      allow: {name: trial, prefixes: [10.0.0.0/8], dry_run: true}\n      deny:\n        - {name: sdeny, prefixes: [10.9.0.0/16]}\n",
    );
    let set = compile(&c);
    // dry rule deeper than a live one: the live one drops, the dry one counts
    assert_eq!(names(&set, None, "198.51.100.1"), (s("live"), s("try")));
    assert_eq!(names(&set, None, "198.51.7.1"), (s("live"), None));
    // dry rule alone: counted, not dropped
    assert_eq!(names(&set, None, "203.0.113.5"), (None, s("try")));
    let k = c.services[0].key();
    // a dry-run allow counts what it would drop and drops nothing
    assert_eq!(names(&set, Some(&k), "192.0.2.1"), (None, s("trial")));
    assert_eq!(names(&set, Some(&k), "10.1.1.1"), (None, None));
    assert_eq!(names(&set, Some(&k), "10.9.1.1"), (s("sdeny"), None));
}

/// A deterministic pseudo-random sequence (xorshift).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Random rules over a few clusters of address space, so that prefixes
/// nest and overlap: `n` prefixes per rule, some rules dry run.
fn random_config(
    rng: &mut Rng,
    rules: usize,
    n: usize,
    dry_every: usize,
) -> (Config, Vec<Ipv4Addr>) {
    let mut y = String::from("filters:\n  deny:\n");
    let bases = [0xC633_0000u32, 0xCB00_7100, 0x0A40_0000, 0x5DB8_D800];
    let mut probes = Vec::new();
    for r in 0..rules {
        y += &format!(
            "    - name: r{r}\n      dry_run: {}\n      prefixes: [",
            r % dry_every == 1
        );
        for i in 0..n {
            let base = bases[(rng.next() % 4) as usize];
            let addr = base ^ (rng.next() as u32 & 0x0003_ffff);
            let len =
                [12u8, 16, 20, 23, 24, 24, 25, 27, 30, 31, 32, 32, 32][(rng.next() % 13) as usize];
            let pfx = Prefix4::new(Ipv4Addr::from(addr), len);
            y += &format!("{}{pfx}", if i > 0 { ", " } else { "" });
            probes.push(Ipv4Addr::from(addr));
            probes.push(Ipv4Addr::from(pfx.first()));
            probes.push(Ipv4Addr::from(pfx.last()));
            probes.push(Ipv4Addr::from(pfx.last().wrapping_add(1)));
        }
        y += "]\n";
    }
    for _ in 0..2000 {
        probes.push(Ipv4Addr::from(rng.next() as u32));
    }
    (cfg(&y, ""), probes)
}

/// The brute-force meaning of the rules: for every rule the longest
/// prefix of it that matches, then the decision of the documented rules.
fn reference(c: &Config, addr: Ipv4Addr, set: &FilterSet) -> Verdict {
    // (length, order, id, dry) of each matching rule
    let mut live: Option<(u8, usize, u16)> = None;
    let mut all: Option<(u8, usize, u16, bool)> = None;
    for (order, r) in c.filters.deny.iter().enumerate() {
        let id = id(set, &r.name);
        let Some(len) = r
            .prefixes
            .iter()
            .filter(|(p, _)| p.contains(addr))
            .map(|(p, _)| p.len)
            .max()
        else {
            continue;
        };
        if !r.dry_run && live.is_none_or(|(l, o, _)| len > l || (len == l && order < o)) {
            live = Some((len, order, id));
        }
        let better = match all {
            None => true,
            Some((l, o, _, d)) => {
                len > l || (len == l && ((d && !r.dry_run) || (d == r.dry_run && order < o)))
            }
        };
        if better {
            all = Some((len, order, id, r.dry_run));
        }
    }
    Verdict {
        drop: live.map(|x| x.2),
        dry: all.filter(|x| x.3).map(|x| x.2),
        ..Verdict::default()
    }
}

#[test]
fn compiled_tables_agree_with_the_rules_on_random_lists() {
    let mut rng = Rng(0x5eed_f117_e125);
    for round in 0..6 {
        let (c, probes) = random_config(&mut rng, 4, 60, 3);
        let set = compile(&c);
        let g = set.global.as_ref().unwrap();
        for addr in probes {
            let want = reference(&c, addr, &set);
            let got = set.decide(None, addr).verdict;
            assert_eq!(got, want, "round {round}, {addr}: decide");
            assert_eq!(
                g.lookup(addr),
                want.encode(),
                "round {round}, {addr}: table"
            );
        }
    }
}

#[test]
fn dry_run_rules_do_not_change_drops() {
    let mut rng = Rng(0xd1ce);
    let (with_dry, probes) = random_config(&mut rng, 5, 50, 2);
    let mut live_only = with_dry.clone();
    live_only.filters.deny.retain(|r| !r.dry_run);
    let a = compile(&with_dry);
    let b = FilterSet::compile(&live_only, &Lists::new(), &a.ids()).unwrap();
    for addr in probes {
        assert_eq!(
            a.decide(None, addr).verdict.drop,
            b.decide(None, addr).verdict.drop,
            "{addr}"
        );
    }
}

#[test]
fn long_prefixes_expand_into_buckets_that_grow_when_full() {
    // /25 .. /32 in many /24s: the long table holds every address once.
    let mut y = String::from("filters:\n  deny:\n    - name: many\n      prefixes: [");
    let mut n = 0;
    for i in 0..300u32 {
        let base = 0xC000_0000u32 + (i << 8);
        y += &format!(
            "{}{}/25, {}/32",
            if i > 0 { ", " } else { "" },
            Ipv4Addr::from(base),
            Ipv4Addr::from(base + 200)
        );
        n += 129;
    }
    y += "]\n";
    let set = compile(&cfg(&y, ""));
    let g = set.global.as_ref().unwrap();
    assert_eq!(g.long_entries, n);
    assert!(g.large, "38700 addresses need the large table");
    assert_eq!(1usize << (32 - g.shift), g.buckets.len());
    let rule = id(&set, "many");
    for i in 0..300u32 {
        let base = 0xC000_0000u32 + (i << 8);
        for off in [0, 5, 127, 200] {
            assert_eq!(
                Verdict::decode(g.lookup(Ipv4Addr::from(base + off))).drop,
                Some(rule)
            );
        }
        for off in [128, 199, 255] {
            assert_eq!(g.lookup(Ipv4Addr::from(base + off)), 0);
        }
    }
    // Too many for a size: refused (the compile then takes the large one).
    let many: Vec<(u32, u32)> = (0..4096 * 8 * 3 / 4 + 1).map(|a| (a, 1)).collect();
    assert!(fill_buckets(&many, 12).is_none());
    assert_eq!(fill_buckets(&many[..100], 12).unwrap().len(), 4096);
}

#[test]
fn rule_ids_stay_with_their_rules_and_are_never_inherited() {
    let one = cfg(
        "filters:\n  deny:\n    - {name: a, prefixes: [198.51.100.0/24]}\n    - {name: b, prefixes: [203.0.113.0/24]}\n  rate_limit:\n    - {name: r, syns_per_second: 10}\n",
        "",
    );
    let s1 = compile(&one);
    let (a1, b1, r1) = (id(&s1, "a"), id(&s1, "b"), id(&s1, "r"));
    assert_eq!([a1, b1, r1], [1, 2, 3]);
    assert_eq!(s1.global_rates, vec![r1]);
    // `a` goes, `c` comes: b and r keep their ids, c gets one never used.
    let two = cfg(
        "filters:\n  deny:\n    - {name: b, prefixes: [203.0.113.0/24]}\n    - {name: c, prefixes: [192.0.2.0/24]}\n  rate_limit:\n    - {name: r, syns_per_second: 10}\n",
        "",
    );
    let s2 = FilterSet::compile(&two, &Lists::new(), &s1.ids()).unwrap();
    assert_eq!((id(&s2, "b"), id(&s2, "r")), (b1, r1));
    assert_eq!(id(&s2, "c"), 4);
    // Same inputs, same digest; any change, another.
    let again = FilterSet::compile(&two, &Lists::new(), &s2.ids()).unwrap();
    assert_eq!(again.digest, s2.digest);
    assert_eq!(
        FilterSet::digest_of(&two, &Lists::new(), &s2.ids()).unwrap(),
        s2.digest
    );
    assert_ne!(s1.digest, s2.digest);
    // When every id was used once, removed rules' ids come back.
    let mut prev = BTreeMap::new();
    for i in 1..4095u16 {
        prev.insert(
            RuleIdent {
                scope: Scope::Global,
                kind: RuleKind::Deny,
                name: format!("old{i}"),
            },
            i,
        );
    }
    let ids = assign_ids(
        &[RuleIdent {
            scope: Scope::Global,
            kind: RuleKind::Deny,
            name: "new".into(),
        }],
        &prev,
    )
    .unwrap();
    assert_eq!(ids, vec![4095]);
}

#[test]
fn rates_become_gcra_parameters() {
    let r = Rate {
        per_second: 1000,
        burst: 50,
    };
    assert_eq!(gcra(&r), (1_000_000, 49_000_000));
    let one = Rate {
        per_second: 3,
        burst: 1,
    };
    assert_eq!(gcra(&one), (333_333_333, 0));
    assert_eq!(rate_mask(RatePer::Address), u32::MAX);
    assert_eq!(rate_mask(RatePer::Subnet).to_ne_bytes(), [255, 255, 255, 0]);
}

#[test]
fn list_files_are_read_relative_to_the_config_and_checked_for_cluster_addresses() {
    let dir = std::env::temp_dir().join(format!("nilb-filters-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("feed.txt"),
        "# feed\n198.51.100.0/24\n10.0.0.0/24 ; covers the cluster\n2001:db8::/32\n",
    )
    .unwrap();
    std::fs::write(dir.join("bad.txt"), "192.0.2.0/24\n192.0.2.300\n").unwrap();
    let c = cfg(
        "filters:\n  deny:\n    - {name: feed, files: [feed.txt]}\n",
        "",
    );
    let lists = load_lists(&c, &dir).unwrap();
    let l = &lists["filters.deny[0].files[0]"];
    assert_eq!((l.parsed.v4.len(), l.parsed.v6), (2, 1));
    assert_eq!(l.path, dir.join("feed.txt"));
    let problems = lists::cluster_coverage(&c, &lists, &c.cluster_addresses_v4());
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].path, "filters.deny[0].files[0]");
    assert!(
        problems[0]
            .message
            .contains("feed.txt: line 3: 10.0.0.0/24 covers cluster address 10.0.0.11"),
        "{}",
        problems[0].message
    );
    // marked: accepted
    let marked = cfg(
        "filters:\n  deny:\n    - {name: feed, files: [feed.txt], covers_cluster: true}\n",
        "",
    );
    assert!(lists::cluster_coverage(&marked, &lists, &marked.cluster_addresses_v4()).is_empty());
    let set = FilterSet::compile(&marked, &lists, &BTreeMap::new()).unwrap();
    assert_eq!(set.rules[0].sources[0].ipv6_ignored, 1);
    let v = set.decide(None, a("10.0.0.11")).verdict;
    assert!(v.drop_covers_cluster && v.drop.is_some());
    // a bad file: field, file, line, reason
    let bad = cfg(
        "filters:\n  deny:\n    - {name: x, files: [bad.txt, missing.txt]}\n",
        "",
    );
    let e = load_lists(&bad, &dir).unwrap_err();
    assert_eq!(e.len(), 2);
    assert_eq!(e[0].path, "filters.deny[0].files[0]");
    assert!(
        e[0].message.contains("bad.txt: line 2: `192.0.2.300`"),
        "{}",
        e[0].message
    );
    assert!(e[0].position.is_some());
    assert_eq!(e[1].path, "filters.deny[0].files[1]");
    assert!(
        e[1].message.contains("missing.txt: cannot read it"),
        "{}",
        e[1].message
    );
    std::fs::remove_dir_all(&dir).ok();
}
