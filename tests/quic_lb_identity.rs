//! The QUIC-LB decoder in C (bpf/quic_lb.h, the data plane's) and in Rust
//! (src/quic_lb.rs, the library servers use) agree: for each of 12
//! configurations (plaintext, single-pass and four-pass, odd and even block
//! lengths, server IDs shorter and longer than half the block, with and
//! without self-encoded lengths), 10,000 random connection IDs run through
//! the C code with BPF_PROG_TEST_RUN, the AES contexts created by the same
//! syscall program the data plane uses. About a fifth of the IDs are bent
//! (another or the reserved codepoint, a wrong length, a wrong self-encoded
//! length) so that the reasons for "not routable" are compared too. Needs
//! root; skipped (one line on stderr) without it.

mod common;

use std::mem::MaybeUninit;

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use nilb::dataplane::abi::{
    self,
    quic_probe_skel::{QuicLbProbeSkel, QuicLbProbeSkelBuilder},
    sys::{nilb_quic_decode as qd, nilb_quic_lb_probe},
};
use nilb::quic_lb::{Config, ConfigSpec, DecodeError, Key};
use rand::{Rng, RngCore, SeedableRng};

const KEY: &str = "8f95f09245765f80256934e50c66207f";
const OTHER_KEY: &str = "fdf726a9893ec05c0632d3956680baf0";

/// (codepoint, server ID length, nonce length, keyed, self-encoded length)
const CONFIGS: &[(u8, usize, usize, bool, bool)] = &[
    (0, 1, 4, false, false),
    (3, 4, 8, false, true),
    (6, 15, 4, false, false),
    (1, 2, 14, true, true),  // single-pass
    (2, 8, 8, true, false),  // single-pass
    (5, 15, 4, true, false), // four-pass, 19 bytes, 4 AES
    (0, 3, 4, true, true),   // four-pass, 7 bytes: 3 AES
    (4, 10, 5, true, false), // four-pass, 15 bytes, server ID past half: 4 AES
    (2, 9, 9, true, true),   // four-pass, even, 3 AES
    (1, 1, 4, true, false),  // shortest
    (3, 2, 17, true, false), // longest nonce
    (6, 7, 12, true, true),  // 19 bytes, 3 AES
];

fn probe<'a>(storage: &'a mut MaybeUninit<libbpf_rs::OpenObject>) -> QuicLbProbeSkel<'a> {
    QuicLbProbeSkelBuilder::default()
        .open(storage)
        .expect("opening the QUIC-LB probe")
        .load()
        .expect("loading the QUIC-LB probe (root and a kernel with the BPF crypto kfuncs needed)")
}

/// One decode through the C code: (enum nilb_quic_decode, server ID bytes).
fn c_decode(skel: &QuicLbProbeSkel<'_>, cfg: &Config, slot: u32, cid: &[u8]) -> (i32, [u8; 16]) {
    let mut rec = nilb_quic_lb_probe {
        cfg: abi::quic_lb_value(cfg),
        crypto_index: slot,
        cid_len: cid.len() as u32,
        ..Default::default()
    };
    rec.cid[..cid.len()].copy_from_slice(cid);
    let (verdict, out) =
        abi::test_run_xdp(&skel.progs.quic_lb_probe, abi::bytes_of(&rec), 0).unwrap();
    assert_eq!(verdict, common::XDP_PASS, "the probe returns XDP_PASS");
    let got: nilb_quic_lb_probe = abi::read_struct(&out).unwrap();
    (got.result, got.sid)
}

/// The C result code the library's answer corresponds to.
fn expected_code(r: &Result<nilb::quic_lb::ServerId, DecodeError>) -> i32 {
    (match r {
        Ok(_) => qd::NILB_QD_OK,
        Err(DecodeError::ReservedCodepoint) => qd::NILB_QD_UNROUTABLE,
        Err(DecodeError::UnknownCodepoint(_)) => qd::NILB_QD_OTHER_CODEPOINT,
        Err(
            DecodeError::Empty
            | DecodeError::TooShort { .. }
            | DecodeError::TooLong(_)
            | DecodeError::LengthMismatch { .. },
        ) => qd::NILB_QD_BAD_LENGTH,
    }) as i32
}

#[test]
fn c_and_rust_decoders_agree_on_10000_random_cids_per_configuration() {
    common::require_root!("BPF");
    let mut storage = MaybeUninit::uninit();
    let skel = probe(&mut storage);
    let key = Key::from_hex(KEY).unwrap();
    abi::install_quic_key(&skel.progs.quic_lb_probe_set_key, 1, Some(&key))
        .expect("creating an ecb(aes) context in a syscall program");
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x7175_6963);
    const N: usize = 10_000;
    let mut total_bad = 0;
    for &(codepoint, server_id_len, nonce_len, keyed, self_encode_length) in CONFIGS {
        let cfg = Config::new(&ConfigSpec {
            codepoint,
            server_id_len,
            nonce_len,
            key: keyed.then(|| key.clone()),
            self_encode_length,
        })
        .unwrap();
        let mut by_code = [0usize; 6];
        let mut bad = 0;
        for i in 0..N {
            let mut cid = [0u8; 20];
            rng.fill_bytes(&mut cid);
            let mut len = cfg.cid_len();
            cid[0] = cfg.first_octet(rng.gen());
            match i % 10 {
                // longer than needed: a server may append bytes (§5.4)
                7 => len = rng.gen_range(cfg.cid_len()..=20),
                // any length at all, 0..=20
                8 => len = rng.gen_range(0..=20),
                // any first octet (other and reserved codepoints, lengths)
                9 => cid[0] = rng.gen(),
                _ => {}
            }
            let cid = &cid[..len];
            let want = cfg.decode(cid);
            let (code, sid) = c_decode(&skel, &cfg, 1, cid);
            by_code[code.clamp(0, 5) as usize] += 1;
            let agree = code == expected_code(&want)
                && match &want {
                    Ok(s) => {
                        sid[..s.len()] == *s.as_bytes() && sid[s.len()..].iter().all(|b| *b == 0)
                    }
                    Err(_) => true,
                };
            if !agree {
                bad += 1;
                if bad <= 3 {
                    eprintln!(
                        "mismatch {cfg:?} cid {}: Rust {want:?}, C code {code} sid {sid:02x?}",
                        cid.iter().map(|b| format!("{b:02x}")).collect::<String>()
                    );
                }
            }
        }
        println!(
            "{:<11} cp {codepoint} sid {server_id_len:>2} nonce {nonce_len:>2} self-encoded {self_encode_length:<5}: {N} CIDs, {bad} mismatches (C results ok/unroutable/other codepoint/bad length: {}/{}/{}/{})",
            cfg.algorithm().name(),
            by_code[0],
            by_code[1],
            by_code[2],
            by_code[3]
        );
        // Every configuration sees routable IDs and each kind of refusal.
        assert!(by_code[0] > N / 2, "{by_code:?}");
        assert!(by_code[2] > 0 && by_code[3] > 0, "{by_code:?}");
        total_bad += bad;
    }
    assert_eq!(total_bad, 0, "C and Rust decoders disagree");
}

#[test]
fn keys_rotate_and_a_missing_key_is_reported() {
    common::require_root!("BPF");
    let mut storage = MaybeUninit::uninit();
    let skel = probe(&mut storage);
    let spec = |key: &str| ConfigSpec {
        codepoint: 2,
        server_id_len: 3,
        nonce_len: 5,
        key: Some(Key::from_hex(key).unwrap()),
        self_encode_length: false,
    };
    let a = Config::new(&spec(KEY)).unwrap();
    let b = Config::new(&spec(OTHER_KEY)).unwrap();
    let sid = "c0ffee".parse().unwrap();
    let cid_a = a.encode(&[0xc0, 0xff, 0xee], &[1, 2, 3, 4, 5]).unwrap();
    let cid_b = b.encode(&[0xc0, 0xff, 0xee], &[1, 2, 3, 4, 5]).unwrap();
    assert_eq!(a.decode(cid_a.as_bytes()), Ok(sid));

    // No context in slot 3 yet: the decoder says so.
    let (code, _) = c_decode(&skel, &a, 3, cid_a.as_bytes());
    assert_eq!(code, qd::NILB_QD_NO_KEY as i32);

    // Key A: A's CIDs decode to the server ID, B's do not.
    abi::install_quic_key(&skel.progs.quic_lb_probe_set_key, 3, Some(a_key())).unwrap();
    let (code, got) = c_decode(&skel, &a, 3, cid_a.as_bytes());
    assert_eq!((code, &got[..3]), (0, &[0xc0, 0xff, 0xee][..]));
    let (_, got) = c_decode(&skel, &a, 3, cid_b.as_bytes());
    assert_ne!(&got[..3], &[0xc0, 0xff, 0xee][..]);

    // Rotated to key B (the reload path: a new context replaces the old).
    abi::install_quic_key(
        &skel.progs.quic_lb_probe_set_key,
        3,
        Some(&Key::from_hex(OTHER_KEY).unwrap()),
    )
    .unwrap();
    let (code, got) = c_decode(&skel, &b, 3, cid_b.as_bytes());
    assert_eq!((code, &got[..3]), (0, &[0xc0, 0xff, 0xee][..]));

    // Cleared: no key again; plaintext needs none.
    abi::install_quic_key(&skel.progs.quic_lb_probe_set_key, 3, None).unwrap();
    let (code, _) = c_decode(&skel, &b, 3, cid_b.as_bytes());
    assert_eq!(code, qd::NILB_QD_NO_KEY as i32);

    // A slot outside the map is an error with the kernel's errno.
    let err = abi::install_quic_key(&skel.progs.quic_lb_probe_set_key, 99, Some(a_key()))
        .unwrap_err()
        .to_string();
    assert!(err.contains("slot 99"), "{err}");
}

fn a_key() -> &'static Key {
    static K: std::sync::OnceLock<Key> = std::sync::OnceLock::new();
    K.get_or_init(|| Key::from_hex(KEY).unwrap())
}
