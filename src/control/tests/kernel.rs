//! A kernel without an optional feature (docs/design.md "Kernel
//! features"): the parts of the config that need it are refused, listed
//! with the reason, and left out of every plan; the rest runs as usual.

use super::fake::FakeDataplane;
use super::*;
use crate::features::{KernelFeatures, FEATURES, QUIC_LB_CRYPTO};

const NODE: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 11));

/// Debian 12's kernel (6.1): everything but the crypto kfuncs.
fn without_crypto() -> KernelFeatures {
    KernelFeatures::new(
        "6.1.0-57-amd64",
        FEATURES.iter().map(|f| f.name != QUIC_LB_CRYPTO).collect(),
    )
}

/// A plaintext and a four-pass QUIC-LB service and a TCP one.
fn quic_config() -> Config {
    let dir = std::env::temp_dir().join(format!("nilb-kernel-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("quic.key");
    std::fs::write(&key, "8f95f09245765f80256934e50c66207f\n").unwrap();
    let y = format!(
        "version: 1\ncluster: {{balancers: [10.0.0.11]}}\nservices:\n\
         \x20 - name: plain\n    vip: 10.0.0.100\n    port: 443\n    protocol: udp\n    quic_lb: {{codepoint: 1, server_id_len: 2, nonce_len: 6, algorithm: plaintext}}\n    backends: [{{dip: 10.0.0.12}}]\n\
         \x20 - name: keyed\n    vip: 10.0.0.101\n    port: 443\n    protocol: udp\n    quic_lb: {{codepoint: 1, server_id_len: 2, nonce_len: 6, algorithm: four-pass, key_file: {}}}\n    backends: [{{dip: 10.0.0.12}}, {{dip: 10.0.0.13}}]\n\
         \x20 - name: web\n    vip: 10.0.0.102\n    port: 80\n    protocol: tcp\n    backends: [{{dip: 10.0.0.13}}]\n",
        key.display()
    );
    Config::parse(&y).unwrap()
}

#[test]
fn keyed_quic_lb_is_refused_without_the_crypto_kfuncs_and_the_rest_runs() {
    let mut cp = ControlPlane::new(quic_config(), 0);
    // With every feature: both QUIC-LB services route by server ID.
    assert_eq!(cp.quic_routes().len(), 2);
    assert_eq!(cp.refused(), []);

    cp.set_kernel_features(&without_crypto());
    let refused = cp.refused();
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0].service, "keyed");
    assert_eq!(refused[0].what, "quic_lb four-pass");
    assert_eq!(refused[0].feature, QUIC_LB_CRYPTO);
    assert!(
        refused[0].reason.contains("Linux 6.10 or newer"),
        "{}",
        refused[0].reason
    );
    let mut dp = FakeDataplane::default();
    cp.apply(&mut dp, NODE, &cp.full_plan()).unwrap();
    assert_eq!(dp.violations, []);
    // The plaintext service routes by server ID; the keyed one follows its
    // bucket table, which is installed like every other service's.
    let routed: Vec<ServiceKey> = dp.quic.iter().map(|r| r.key).collect();
    assert_eq!(routed, [cp.config().services[0].key()]);
    assert_eq!(dp.services.len(), 3);

    // A reload keeps the refusal; one without the keyed service has none.
    let mut c = quic_config();
    c.services.remove(1);
    cp.update(c, 1000);
    assert_eq!(cp.refused(), []);
    assert_eq!(cp.quic_routes().len(), 1);
}
