//! The loopback mode bring-up chose (force loopback, RoCE to the port's
//! own GID, InfiniBand to its own LID), in words: narrated by the session,
//! the scenario and the self-test.

use mlx5_driver::loopback::{LoopbackMode, RoceVersion};
use mlx5_driver::{CmdObserver, Hca};
use mlx5_hal::Hal;

/// The loopback mode bring-up chose, and what it configured, in words.
pub fn loopback_text<H: Hal, O: CmdObserver>(hca: &Hca<H, O>) -> String {
    let roce = match (hca.nic_vport(), hca.roce_enabled()) {
        (Some(v), now) if v.roce_en != now => {
            format!("bring-up set roce_en {} -> {}", v.roce_en as u8, now as u8)
        }
        (Some(v), _) => format!("roce_en {} as found, left alone", v.roce_en as u8),
        (None, _) => "no NIC vport (InfiniBand port)".into(),
    };
    match hca.loopback_mode() {
        Some(LoopbackMode::ForceLoopback) => {
            format!("force loopback (the QP path's fl bit; {roce}; no GID used)")
        }
        Some(LoopbackMode::Roce {
            gid_index,
            gid,
            mac,
            version,
        }) => format!(
            "RoCE {} to the port's own address ({roce}; GID entry {gid_index} = {} for MAC {})",
            match version {
                RoceVersion::V1 => "v1",
                RoceVersion::V2 => "v2",
            },
            gid_text(&gid),
            mac_text(&mac)
        ),
        Some(LoopbackMode::Ib { lid }) => format!(
            "InfiniBand to the port's own LID {lid:#x} (from QUERY_HCA_VPORT_CONTEXT; no roce_en, no GID entry on an InfiniBand port)"
        ),
        None => format!("none: the device offers no force loopback, RoCE or IB port ({roce})"),
        Some(other) => format!("{other:?} ({roce})"),
    }
}

/// How the QPs address each other in the loopback mode, in a few words.
pub fn loopback_path<H: Hal, O: CmdObserver>(hca: &Hca<H, O>) -> String {
    match hca.loopback_mode() {
        Some(LoopbackMode::ForceLoopback) => "in force loopback (fl = 1, no address)".into(),
        Some(LoopbackMode::Roce {
            gid_index,
            gid,
            mac,
            version,
        }) => format!(
            "by RoCE {}: source GID index {gid_index}, destination GID {} and MAC {} (their own)",
            match version {
                RoceVersion::V1 => "v1",
                RoceVersion::V2 => "v2",
            },
            gid_text(&gid),
            mac_text(&mac)
        ),
        Some(LoopbackMode::Ib { lid }) => {
            format!("by InfiniBand, destination LID {lid:#x} (their own)")
        }
        None => "with no loopback mode".into(),
        Some(other) => format!("in loopback mode {other:?}"),
    }
}

/// Short name of the loopback mode (JSON, tables).
pub fn loopback_name<H: Hal, O: CmdObserver>(hca: &Hca<H, O>) -> &'static str {
    match hca.loopback_mode() {
        Some(LoopbackMode::ForceLoopback) => "force_loopback",
        Some(LoopbackMode::Roce { .. }) => "roce",
        Some(LoopbackMode::Ib { .. }) => "ib",
        None => "none",
        Some(_) => "other",
    }
}

/// `fe80::0202:c9ff:fe00:0001` style (no zero compression).
pub fn gid_text(gid: &[u8; 16]) -> String {
    let groups: Vec<String> = gid
        .chunks(2)
        .map(|c| format!("{:x}", u16::from_be_bytes([c[0], c[1]])))
        .collect();
    groups.join(":")
}

/// `00:02:c9:00:00:01`.
pub fn mac_text(mac: &[u8; 6]) -> String {
    let b: Vec<String> = mac.iter().map(|b| format!("{b:02x}")).collect();
    b.join(":")
}
