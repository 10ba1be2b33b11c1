//! Reading the list files a configuration names, and the check that no
//! top-level deny rule covers a cluster address unless it is marked
//! `covers_cluster` (docs/config.md "Filters"). The only I/O of the
//! filters; parsing itself is [`crate::prefix::parse_list`].

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use super::{Digest, FilterSet, RuleIdent};
use crate::config::{Config, ConfigError, ListFile, PrefixRule, Problem};
use crate::prefix::{parse_list, ParsedList, Prefix4, MAX_LIST_BYTES};

/// One list file as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadedList {
    /// The path read (relative paths resolved against the configuration's
    /// directory).
    pub path: PathBuf,
    /// Its prefixes.
    pub parsed: ParsedList,
    /// Digest of its bytes.
    pub digest: u64,
}

/// Every list file of a configuration, by the field path that names it
/// (`filters.deny[0].files[1]`).
pub type Lists = BTreeMap<String, LoadedList>;

/// Problems reported for list files at most (the rest are counted in the
/// last one).
pub const MAX_LIST_PROBLEMS: usize = 20;

/// Every prefix rule of a configuration with its scope: (rule, top-level).
fn prefix_rules(config: &Config) -> Vec<(&PrefixRule, bool)> {
    let mut out: Vec<(&PrefixRule, bool)> = config.filters.deny.iter().map(|r| (r, true)).collect();
    for s in &config.services {
        out.extend(s.filters.allow.iter().map(|r| (r, false)));
        out.extend(s.filters.deny.iter().map(|r| (r, false)));
    }
    out
}

/// Where a list file named in the configuration is: relative paths are
/// relative to `base`, the configuration file's directory.
pub fn resolve(base: &Path, file: &ListFile) -> PathBuf {
    if file.path.is_absolute() {
        file.path.clone()
    } else {
        base.join(&file.path)
    }
}

/// The directory that relative list paths of the configuration at
/// `config_path` are relative to.
pub fn base_dir(config_path: &Path) -> PathBuf {
    match config_path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

fn problem(file: &ListFile, message: String) -> Problem {
    Problem {
        path: file.field.clone(),
        message,
        position: file.position,
    }
}

/// Read and parse every list file `config` names (relative to `base`).
/// Every unreadable or bad file is a problem naming the field, the file,
/// the bad lines and why.
pub fn load_lists(config: &Config, base: &Path) -> Result<Lists, Vec<Problem>> {
    let mut lists = Lists::new();
    let mut problems = Vec::new();
    for (rule, _) in prefix_rules(config) {
        for f in &rule.files {
            let path = resolve(base, f);
            let text = match read_capped(&path) {
                Ok(t) => t,
                Err(e) => {
                    problems.push(problem(f, format!("list file {}: {e}", path.display())));
                    continue;
                }
            };
            match parse_list(&text) {
                Ok(parsed) => {
                    let digest = Digest::default().bytes(text.as_bytes()).finish();
                    lists.insert(
                        f.field.clone(),
                        LoadedList {
                            path,
                            parsed,
                            digest,
                        },
                    );
                }
                Err(e) => problems.push(problem(f, format!("list file {}: {e}", path.display()))),
            }
        }
    }
    if problems.is_empty() {
        Ok(lists)
    } else {
        Err(problems)
    }
}

/// A file's text, refused above [`MAX_LIST_BYTES`] or when it is not UTF-8.
fn read_capped(path: &Path) -> Result<String, String> {
    let f = crate::config::open_regular_file(path).map_err(|e| format!("cannot read it: {e}"))?;
    let mut bytes = Vec::new();
    f.take(MAX_LIST_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read it: {e}"))?;
    if bytes.len() > MAX_LIST_BYTES {
        return Err(format!("larger than {MAX_LIST_BYTES} bytes"));
    }
    String::from_utf8(bytes).map_err(|e| {
        let upto = &e.as_bytes()[..e.utf8_error().valid_up_to()];
        let line = 1 + upto.iter().filter(|&&b| b == b'\n').count();
        format!("line {line}: not UTF-8 text")
    })
}

/// Top-level deny rules not marked `covers_cluster` whose prefixes (inline
/// or from `lists`) cover an address of `cluster` (the cluster's GUE and
/// health checks come from those and must never be filtered). One problem
/// per covering prefix, at most [`MAX_LIST_PROBLEMS`].
pub fn cluster_coverage(
    config: &Config,
    lists: &Lists,
    cluster: &BTreeSet<Ipv4Addr>,
) -> Vec<Problem> {
    let mut out = Vec::new();
    let mut more = 0usize;
    let covered = |p: &Prefix4| {
        cluster
            .range(p.addr..)
            .next()
            .filter(|a| u32::from(**a) <= p.last())
            .copied()
    };
    let hint = "narrow it, or mark the rule `covers_cluster: true` to have cluster addresses exempted (the cluster's own GUE and health checks are never filtered)";
    for (ri, rule) in config.filters.deny.iter().enumerate() {
        if rule.covers_cluster {
            continue;
        }
        for (pi, (p, pos)) in rule.prefixes.iter().enumerate() {
            if let Some(a) = covered(p) {
                if out.len() < MAX_LIST_PROBLEMS {
                    out.push(Problem {
                        path: format!("filters.deny[{ri}].prefixes[{pi}]"),
                        message: format!("{p} covers cluster address {a}: {hint}"),
                        position: *pos,
                    });
                } else {
                    more += 1;
                }
            }
        }
        for f in &rule.files {
            let Some(l) = lists.get(&f.field) else {
                continue;
            };
            for (p, line) in &l.parsed.v4 {
                if let Some(a) = covered(p) {
                    if out.len() < MAX_LIST_PROBLEMS {
                        out.push(problem(
                            f,
                            format!(
                                "list file {}: line {line}: {p} covers cluster address {a}: {hint}",
                                l.path.display()
                            ),
                        ));
                    } else {
                        more += 1;
                    }
                }
            }
        }
    }
    if more > 0 {
        if let Some(last) = out.last_mut() {
            last.message += &format!(" (and {more} more prefixes that cover cluster addresses)");
        }
    }
    out
}

/// The edge filters of `config` (docs/config.md "Filters"): its list files
/// read (relative to the configuration's directory), checked (no top-level
/// deny rule covers an address of `cluster` unless marked), and compiled,
/// keeping the rule ids of `prev`. Only balancers filter (the XDP program
/// runs there): elsewhere the result is empty and no file is read. `running`
/// is reused when nothing changed (same rules, ids and list contents).
/// Returns the set and the milliseconds the read and compile took.
pub fn prepare(
    config: &Config,
    config_path: &Path,
    cluster: &BTreeSet<Ipv4Addr>,
    balancer: bool,
    running: Option<&Arc<FilterSet>>,
    prev: &BTreeMap<RuleIdent, u16>,
) -> Result<(Arc<FilterSet>, u64), ConfigError> {
    let started = Instant::now();
    if !balancer {
        return Ok((Arc::new(FilterSet::default()), 0));
    }
    let lists =
        load_lists(config, &base_dir(config_path)).map_err(|problems| ConfigError { problems })?;
    let coverage = cluster_coverage(config, &lists, cluster);
    if !coverage.is_empty() {
        return Err(ConfigError { problems: coverage });
    }
    let compile_error = |e: super::CompileError| ConfigError {
        problems: vec![Problem {
            path: "filters".into(),
            message: e.0,
            position: None,
        }],
    };
    if let Some(r) = running {
        if FilterSet::digest_of(config, &lists, prev).map_err(compile_error)? == r.digest {
            return Ok((r.clone(), started.elapsed().as_millis() as u64));
        }
    }
    let set = FilterSet::compile(config, &lists, prev).map_err(compile_error)?;
    Ok((Arc::new(set), started.elapsed().as_millis() as u64))
}
