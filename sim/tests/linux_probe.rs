//! The commands Linux 6.1's `mlx5_core` sends while it probes a function
//! (`mlx5_function_setup`, `mlx5_load`), byte for byte as its command
//! interface writes them, and the rule they check: the model advertises no
//! capability bit whose page or command it does not serve
//! (docs/fidelity.md §3).

use crate::common::*;
use mlx5_regs::consts::op_mod as om;
use mlx5_regs::layouts::*;
use mlx5_regs::{CmdStatus, Opcode};
use mlx5_sim::{syndrome as sy, Profile, SimConfig};

/// QUERY_HCA_CAP as `mlx5_core_get_caps_mode` writes it: opcode 0x100,
/// `op_mod = cap_type << 1 | mode` in bytes 6-7, everything else zero.
fn linux_query_cap(cap_type: u16, cur: bool) -> Vec<u8> {
    let mut i = vec![0u8; 16];
    i[0..2].copy_from_slice(&0x0100u16.to_be_bytes());
    i[6..8].copy_from_slice(&((cap_type << 1) | cur as u16).to_be_bytes());
    i
}

/// SET_DRIVER_VERSION as `mlx5_set_driver_version` writes it: opcode 0x10d,
/// op_mod 0, the string from byte 16, NUL-padded to 64 bytes.
fn linux_set_driver_version(s: &str) -> Vec<u8> {
    let mut i = vec![0u8; 0x50];
    i[0..2].copy_from_slice(&0x010du16.to_be_bytes());
    i[16..16 + s.len()].copy_from_slice(s.as_bytes());
    i
}

fn general_cap(f: &mut Fw, cur: bool) -> Vec<u8> {
    let o = f.ok(
        &linux_query_cap(om::CAP_GENERAL, cur),
        query_hca_cap_out::SIZE,
    );
    query_hca_cap_out::capability.get(&o).to_vec()
}

#[test]
fn every_profile_serves_the_pages_its_general_caps_advertise() {
    for p in [
        Profile::ConnectX4Lx,
        Profile::ConnectX5,
        Profile::ConnectX6Dx,
        Profile::ConnectX7,
    ] {
        let mut f = Fw::new(SimConfig::profile(p));
        f.enable();
        for cur in [false, true] {
            let cap = general_cap(&mut f, cur);
            // `pg`: Linux then reads the ODP page (`handle_hca_cap_odp`); it is
            // served, all zero, so Linux sets nothing there.
            assert!(cmd_hca_cap::pg.get(&cap), "{p:?}");
            for mode in [false, true] {
                let o = f.ok(&linux_query_cap(om::CAP_ODP, mode), query_hca_cap_out::SIZE);
                let page = query_hca_cap_out::capability.get(&o);
                assert!(page.iter().all(|&b| b == 0), "{p:?}: ODP page all zero");
            }
            // `eth_net_offloads` would make Linux read the Ethernet offloads
            // page and fail its probe when refused: never advertised.
            assert!(!cmd_hca_cap::eth_net_offloads.get(&cap), "{p:?}");
            // `roce` on the Ethernet port, with its page.
            assert!(cmd_hca_cap::roce.get(&cap), "{p:?}");
            f.ok(&linux_query_cap(om::CAP_ROCE, cur), query_hca_cap_out::SIZE);
            // `atomic`, with its page: CMP_SWAP and FETCH_ADD on 8 bytes,
            // settable to host endianness (Linux `handle_hca_cap_atomic`).
            assert!(cmd_hca_cap::atomic.get(&cap), "{p:?}");
            let o = f.ok(
                &linux_query_cap(om::CAP_ATOMIC, cur),
                query_hca_cap_out::SIZE,
            );
            let page = query_hca_cap_out::capability.get(&o);
            assert_eq!(atomic_caps::atomic_operations.get(page), 3, "{p:?}");
            assert_eq!(atomic_caps::atomic_size_qp.get(page), 8, "{p:?}");
            assert!(atomic_caps::supported_atomic_req_8b_endianness_mode_1.get(page));
        }
    }
}

#[test]
fn an_ib_port_reports_no_roce_because_it_serves_no_roce_page() {
    let mut f = Fw::default();
    f.dev.caps_mut(|c| c.port_type = 0);
    f.enable();
    for cur in [false, true] {
        let cap = general_cap(&mut f, cur);
        assert!(!cmd_hca_cap::roce.get(&cap));
        f.refused(
            &linux_query_cap(om::CAP_ROCE, cur),
            query_hca_cap_out::SIZE,
            CmdStatus::BAD_PARAM_ERR,
            sy::CAP_TYPE,
        );
    }
}

#[test]
fn the_odp_page_is_refused_without_pg_and_takes_no_nonzero_setting() {
    let mut f = Fw::default();
    f.enable();
    // SET_HCA_CAP of the (all-zero) ODP page as read back: accepted.
    let mut set = vec![0u8; set_hca_cap_in::SIZE];
    set[0..2].copy_from_slice(&0x0109u16.to_be_bytes());
    set[6..8].copy_from_slice(&om::set_hca_cap(om::CAP_ODP).to_be_bytes());
    assert!(f.exec(&set, set_hca_cap_out::SIZE).ok());
    // Any bit set goes above the page's zero maximum.
    set[set_hca_cap_in::capability.range().start + 0x40] = 0x80;
    f.refused(
        &set,
        set_hca_cap_out::SIZE,
        CmdStatus::BAD_PARAM_ERR,
        sy::SET_CAP_ABOVE_MAX,
    );
    f.dev.caps_mut(|c| c.pg = false);
    assert!(!cmd_hca_cap::pg.get(&general_cap(&mut f, false)));
    f.refused(
        &linux_query_cap(om::CAP_ODP, false),
        query_hca_cap_out::SIZE,
        CmdStatus::BAD_PARAM_ERR,
        sy::CAP_TYPE,
    );
}

#[test]
fn set_driver_version_after_init_hca_is_accepted_and_recorded() {
    let mut f = Fw::default();
    let cmd = linux_set_driver_version("Linux,mlx5_core,6.1.192");
    f.enable();
    // Before INIT_HCA the firmware refuses it (Linux sends it right after).
    f.refused(
        &cmd,
        set_driver_version_out::SIZE,
        CmdStatus::BAD_SYS_STATE_ERR,
        sy::per_opcode(sy::STATE_ENABLED, Opcode::SET_DRIVER_VERSION.0),
    );
    f.dev.function_reset();
    let mut f = Fw::up(1);
    assert!(cmd_hca_cap::driver_version.get(&general_cap(&mut f, true)));
    assert_eq!(f.dev.driver_version(), None);
    f.ok(&cmd, set_driver_version_out::SIZE);
    assert_eq!(
        f.dev.driver_version().as_deref(),
        Some("Linux,mlx5_core,6.1.192")
    );
    // A reserved bit is refused like in every other command.
    let mut bad = cmd.clone();
    bad[8] = 1;
    f.refused(
        &bad,
        set_driver_version_out::SIZE,
        CmdStatus::BAD_PARAM_ERR,
        sy::per_opcode(sy::RESERVED, Opcode::SET_DRIVER_VERSION.0),
    );
    // Without the capability the command does not exist.
    f.dev.caps_mut(|c| c.driver_version = false);
    f.refused(
        &cmd,
        set_driver_version_out::SIZE,
        CmdStatus::BAD_OP_ERR,
        sy::per_opcode(sy::UNKNOWN_OPCODE, Opcode::SET_DRIVER_VERSION.0),
    );
    // A reset forgets it.
    f.dev.function_reset();
    assert_eq!(f.dev.driver_version(), None);
}

/// SET_HCA_CAP of the atomic page as `handle_hca_cap_atomic` writes it: a
/// zeroed `set_hca_cap_in` (it is memset between the general and the atomic
/// page), opcode 0x109, `op_mod` 3 << 1, and in the page only
/// `atomic_req_8B_endianness_mode` = 1 (host endianness).
fn linux_set_atomic_host_endianness() -> Vec<u8> {
    let mut i = vec![0u8; set_hca_cap_in::SIZE];
    i[0..2].copy_from_slice(&0x0109u16.to_be_bytes());
    i[6..8].copy_from_slice(&(3u16 << 1).to_be_bytes());
    atomic_caps::atomic_req_8b_endianness_mode
        .set(set_hca_cap_in::capability.get_mut(&mut i), 1)
        .unwrap();
    i
}

#[test]
fn linux_sets_host_endianness_with_a_page_that_is_zero_elsewhere() {
    let mut f = Fw::new(SimConfig::profile(Profile::ConnectX5));
    f.enable();
    assert!(f.set_issi(1).ok());
    let set = linux_set_atomic_host_endianness();
    // Exactly the bytes Linux 6.1 sends: the page's other fields are zero,
    // not the device's values, and that is not a change of them.
    assert_eq!(set[0x10..].iter().filter(|&&b| b != 0).count(), 1);
    f.ok(&set, set_hca_cap_out::SIZE);
    let o = f.ok(
        &linux_query_cap(om::CAP_ATOMIC, true),
        query_hca_cap_out::SIZE,
    );
    let page = query_hca_cap_out::capability.get(&o);
    assert_eq!(atomic_caps::atomic_req_8b_endianness_mode.get(page), 1);
    assert_eq!(
        atomic_caps::atomic_operations.get(page),
        3,
        "the zeros set nothing"
    );
}
