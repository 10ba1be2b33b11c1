//! Build script: compiles the BPF programs in `bpf/` into libbpf-rs skeletons
//! and generates the Rust mirror of the shared header `bpf/nilb.h` with
//! bindgen, all into `OUT_DIR`.
//!
//! The BPF compiler is clang 19 (`clang-19`, Debian package `clang-19`,
//! installed by scripts/setup.sh; `NILB_BPF_CLANG` names another one): the
//! QUIC-LB decoder keeps its AES contexts as kernel pointers in a map
//! (`__kptr`), which needs the BTF type tags clang 14 does not emit, and
//! clang 19's code is 5-9 % shorter on every packet path
//! (bench/bpf_paths.py).

use std::env;
use std::ffi::OsStr;
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

const PROGRAMS: &[(&str, &str)] = &[
    ("bpf/nilb.bpf.c", "nilb.skel.rs"),
    ("bpf/hash_probe.bpf.c", "hash_probe.skel.rs"),
    ("bpf/quic_lb_probe.bpf.c", "quic_lb_probe.skel.rs"),
];

/// The BPF compiler: `NILB_BPF_CLANG`, else `clang-19`.
fn bpf_clang() -> PathBuf {
    println!("cargo:rerun-if-env-changed=NILB_BPF_CLANG");
    let clang = env::var_os("NILB_BPF_CLANG").unwrap_or_else(|| "clang-19".into());
    let ok = std::process::Command::new(&clang)
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !ok {
        panic!(
            "the BPF programs need clang 19 (`{}` not found): run scripts/setup.sh \
             (Debian package clang-19), or set NILB_BPF_CLANG to a clang >= 18",
            PathBuf::from(&clang).display()
        );
    }
    PathBuf::from(clang)
}

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR is set by cargo"));
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let vmlinux = manifest.join("vmlinux");
    let bpf_dir = manifest.join("bpf");

    let clang = bpf_clang();
    for (src, skel) in PROGRAMS {
        SkeletonBuilder::new()
            .source(src)
            .clang(&clang)
            .clang_args([
                OsStr::new("-I"),
                vmlinux.as_os_str(),
                OsStr::new("-I"),
                bpf_dir.as_os_str(),
                OsStr::new("-O2"),
                OsStr::new("-Wall"),
                OsStr::new("-Werror"),
            ])
            .build_and_generate(out.join(skel))
            .unwrap_or_else(|e| panic!("building BPF skeleton for {src}: {e:#}"));
    }

    // The shared header, with the kernel's fixed-width types spelled out.
    let bindings = bindgen::Builder::default()
        .header_contents(
            "nilb_wrapper.h",
            "typedef unsigned char __u8; typedef unsigned short __u16;\n\
             typedef unsigned int __u32; typedef unsigned long long __u64;\n\
             typedef int __s32;\n\
             #include \"nilb.h\"\n",
        )
        .clang_arg(format!("-I{}", bpf_dir.display()))
        .allowlist_type("nilb_.*")
        .allowlist_var("NILB_.*")
        .rustified_enum("nilb_counter")
        .constified_enum_module(
            "nilb_(limits|wire|config_flags|control_health|control_admin|control_flags|family|filter_bits|filter_kind|quic_limits|quic_algorithm|quic_flags|quic_decode|service_flags|addr_flags)",
        )
        .derive_default(true)
        .derive_debug(true)
        .layout_tests(true)
        .generate()
        .expect("bindgen on bpf/nilb.h");
    bindings
        .write_to_file(out.join("nilb_abi.rs"))
        .expect("writing nilb_abi.rs");

    write_counter_names(&bpf_dir.join("nilb.h"), &out.join("counter_names.rs"));

    println!("cargo:rerun-if-changed=bpf");
    println!("cargo:rerun-if-changed=vmlinux");
}

/// Emit `COUNTER_NAMES` and `COUNTER_HELP` from `enum nilb_counter` in the
/// shared header, so the header stays the one source of counter names: each
/// `C_FOO_BAR, /* help */` line becomes name `foo_bar` with its comment.
fn write_counter_names(header: &std::path::Path, out: &std::path::Path) {
    let text = std::fs::read_to_string(header).expect("reading bpf/nilb.h");
    let start = text
        .find("enum nilb_counter {")
        .expect("enum nilb_counter in nilb.h");
    let body = &text[start..text[start..].find("};").expect("end of enum") + start];
    let mut names = Vec::new();
    let mut help = Vec::new();
    for line in body.lines().map(str::trim) {
        let Some(rest) = line.strip_prefix("C_") else {
            continue;
        };
        let ident: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let comment = line
            .split_once("/*")
            .and_then(|(_, c)| c.split_once("*/"))
            .map(|(c, _)| c.trim().to_string())
            .unwrap_or_default();
        names.push(ident.to_ascii_lowercase());
        help.push(comment);
    }
    let src = format!(
        "/// Counter names in `enum nilb_counter` order (generated from bpf/nilb.h).\n\
         pub const COUNTER_NAMES: [&str; {n}] = {names:?};\n\
         /// One-line meaning of each counter (the header's comments).\n\
         pub const COUNTER_HELP: [&str; {n}] = {help:?};\n",
        n = names.len()
    );
    std::fs::write(out, src).expect("writing counter_names.rs");
}
