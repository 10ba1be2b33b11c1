//! Load scrapes for `dynamic_weight: {source: cpu}`: one periodic task per
//! (service, backend) that fetches the backend's Prometheus text endpoint
//! (`http://DIP:metrics_port/metrics_path`) and extracts its CPU load:
//! nilb's own gauge `nilb_host_cpu_utilization_ratio` if present, otherwise
//! node_exporter's `node_cpu_seconds_total` counters (busy = all modes but
//! idle and iowait), so that backends without nilb work too. Parsing uses the
//! prometheus-parse crate.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::sync::mpsc;

use super::periodic::{run_periodically, Periodic, ProbeKey};
use crate::config::{DynamicWeight, LoadSource};
use crate::types::{LoadSample, ServiceKey};

/// nilb's own host CPU gauge (0..1), exported by every `nilb run`.
pub const CPU_GAUGE: &str = "nilb_host_cpu_utilization_ratio";
/// node_exporter's CPU counters.
pub const NODE_CPU: &str = "node_cpu_seconds_total";

/// One scrape result.
#[derive(Clone, Debug)]
pub struct LoadResult {
    /// Service whose dynamic weights asked for it.
    pub service: ServiceKey,
    /// Backend scraped.
    pub dip: IpAddr,
    /// Task incarnation (see [`Periodic::is_current`]).
    pub generation: u64,
    /// The sample, or why there is none.
    pub sample: Result<LoadSample, String>,
}

/// What a scrape task does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScrapeSpec {
    /// Full URL.
    pub url: String,
    /// Period.
    pub interval_ms: u64,
}

/// Extract a CPU sample from Prometheus text exposition.
pub fn parse_cpu(text: &str) -> Result<LoadSample, String> {
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
        .map_err(|e| format!("unparseable metrics: {e}"))?;
    let value = |v: &prometheus_parse::Value| match v {
        prometheus_parse::Value::Counter(x)
        | prometheus_parse::Value::Gauge(x)
        | prometheus_parse::Value::Untyped(x) => Some(*x),
        _ => None,
    };
    if let Some(u) = scrape
        .samples
        .iter()
        .find(|s| s.metric == CPU_GAUGE)
        .and_then(|s| value(&s.value))
    {
        if !(0.0..=1.0).contains(&u) || !u.is_finite() {
            return Err(format!("{CPU_GAUGE} = {u} is outside 0..1"));
        }
        return Ok(LoadSample::Utilisation(u));
    }
    let (mut busy, mut total, mut seen) = (0.0, 0.0, false);
    for s in scrape.samples.iter().filter(|s| s.metric == NODE_CPU) {
        let Some(v) = value(&s.value) else { continue };
        seen = true;
        total += v;
        match s.labels.get("mode") {
            Some("idle") | Some("iowait") => {}
            _ => busy += v,
        }
    }
    if seen {
        Ok(LoadSample::CpuSeconds { busy, total })
    } else {
        Err(format!("no {CPU_GAUGE} or {NODE_CPU} in the metrics"))
    }
}

/// Fetch and parse one backend's CPU load.
pub async fn scrape_once(
    client: &reqwest::Client,
    url: &str,
    timeout: Duration,
) -> Result<LoadSample, String> {
    let resp = client
        .get(url)
        .timeout(timeout)
        .send()
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    if !resp.status().is_success() {
        return Err(format!("{url}: status {}", resp.status().as_u16()));
    }
    let text = resp.text().await.map_err(|e| format!("{url}: {e}"))?;
    parse_cpu(&text)
}

/// The running scrape tasks.
pub struct Scrapers {
    tasks: Periodic<ScrapeSpec>,
    client: reqwest::Client,
    tx: mpsc::Sender<LoadResult>,
}

impl Scrapers {
    /// Scrapers on `runtime`, sending to `tx`.
    pub fn new(
        runtime: tokio::runtime::Handle,
        tx: mpsc::Sender<LoadResult>,
    ) -> anyhow::Result<Self> {
        Ok(Scrapers {
            tasks: Periodic::new(runtime),
            client: super::checker::http_client()?,
            tx,
        })
    }

    /// Scrape every backend of every service with `dynamic_weight: {source:
    /// cpu}` in `targets` ((service, dip, settings)).
    pub fn sync(&mut self, targets: &[(ServiceKey, IpAddr, DynamicWeight)]) {
        let want: HashMap<ProbeKey, ScrapeSpec> = targets
            .iter()
            .filter(|(_, _, d)| d.source == LoadSource::Cpu)
            .map(|(s, dip, d)| {
                (
                    (*s, *dip),
                    ScrapeSpec {
                        url: format!(
                            "http://{}{}",
                            SocketAddr::from((*dip, d.metrics_port)),
                            d.metrics_path
                        ),
                        interval_ms: d.interval_ms,
                    },
                )
            })
            .collect();
        let (client, tx) = (self.client.clone(), self.tx.clone());
        self.tasks
            .sync(&want, move |(service, dip), spec, generation| {
                let (client, tx) = (client.clone(), tx.clone());
                let interval = Duration::from_millis(spec.interval_ms);
                run_periodically(
                    interval,
                    interval,
                    move || {
                        let (client, url) = (client.clone(), spec.url.clone());
                        async move {
                            LoadResult {
                                service,
                                dip,
                                generation,
                                sample: scrape_once(&client, &url, interval / 2).await,
                            }
                        }
                    },
                    tx,
                )
            });
    }

    /// Whether `r` comes from the live task of its target.
    pub fn is_current(&self, r: &LoadResult) -> bool {
        self.tasks.is_current(&(r.service, r.dip), r.generation)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nilb_gauge_wins() {
        let text = "# TYPE nilb_host_cpu_utilization_ratio gauge\nnilb_host_cpu_utilization_ratio 0.42\nnode_cpu_seconds_total{cpu=\"0\",mode=\"idle\"} 5\n";
        assert_eq!(parse_cpu(text), Ok(LoadSample::Utilisation(0.42)));
    }

    #[test]
    fn node_exporter_counters() {
        let text = "# HELP node_cpu_seconds_total Seconds the CPUs spent in each mode.\n# TYPE node_cpu_seconds_total counter\nnode_cpu_seconds_total{cpu=\"0\",mode=\"idle\"} 70\nnode_cpu_seconds_total{cpu=\"0\",mode=\"iowait\"} 5\nnode_cpu_seconds_total{cpu=\"0\",mode=\"user\"} 20\nnode_cpu_seconds_total{cpu=\"1\",mode=\"system\"} 5\n";
        assert_eq!(
            parse_cpu(text),
            Ok(LoadSample::CpuSeconds {
                busy: 25.0,
                total: 100.0
            })
        );
    }

    #[test]
    fn missing_or_bad() {
        assert!(parse_cpu("up 1\n")
            .unwrap_err()
            .contains("no nilb_host_cpu"));
        assert!(parse_cpu("nilb_host_cpu_utilization_ratio 1.5\n")
            .unwrap_err()
            .contains("outside"));
    }
}
