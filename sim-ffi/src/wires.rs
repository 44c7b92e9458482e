//! Models of one process joined by a wire: a profile string ending in
//! `,wire=NAME` puts the model's port on the process's wire `NAME`
//! (created by the first model that names it), so two PCI functions of one
//! VMM talk to each other in real RoCE or InfiniBand packets, as two ports
//! joined by a cable (docs/wire.md, "Two functions in one QEMU").
//!
//! The members of a wire share the VMM's clock: a step of one (an MMIO
//! access, its timer) first brings every other member to the same time, a
//! tick runs what fell due on all of them, and each member's next deadline
//! is the earliest of the wire. So a frame one function sends is taken by
//! the other at the right time, and the other's timers (ACK timeout, RNR
//! wait) run even when only the first function's timer is armed. This
//! needs every call for every member serialised by the caller (QEMU: the
//! big lock), which the ABI asks for one model already.
//!
//! Each member gets its own seed (the default plus its join order on the
//! wire, from 1), so the functions' MACs and LIDs differ as two cards' do.

use std::collections::BTreeMap;
use std::sync::Mutex;

use mlx5_sim::wire::{LinkType, Wire};
use mlx5_sim::{Device, SimConfig};

/// One named wire of the process and the models on it.
struct Joined {
    wire: Wire,
    /// Models that joined so far (the next one's seed offset).
    joined: u64,
    /// The live members, by member id.
    members: Vec<(u64, Device)>,
}

/// The process's wires, by name.
static WIRES: Mutex<BTreeMap<String, Joined>> = Mutex::new(BTreeMap::new());
/// The next member id (unique in the process).
static NEXT_ID: Mutex<u64> = Mutex::new(1);

/// A model's membership of a wire.
#[derive(Debug, Clone)]
pub(crate) struct Member {
    name: String,
    id: u64,
}

fn wires() -> std::sync::MutexGuard<'static, BTreeMap<String, Joined>> {
    // A panic elsewhere never leaves the map half-changed.
    WIRES.lock().unwrap_or_else(|e| e.into_inner())
}

/// Build a device with `make(seed)` and put its port on wire `name` of
/// link type `link`. `None` when the wire exists with the other link type
/// (an Ethernet port and an InfiniBand port cannot share a cable) or the
/// port refuses.
pub(crate) fn join(
    name: &str,
    link: LinkType,
    make: impl FnOnce(u64) -> Device,
) -> Option<(Device, Member)> {
    let mut all = wires();
    let j = all.entry(name.to_string()).or_insert_with(|| Joined {
        wire: Wire::new(link),
        joined: 0,
        members: Vec::new(),
    });
    if j.wire.link() != link {
        return None;
    }
    let dev = make(SimConfig::default().seed.wrapping_add(j.joined + 1));
    dev.connect(&j.wire).ok()?;
    j.joined += 1;
    let id = {
        let mut next = NEXT_ID.lock().unwrap_or_else(|e| e.into_inner());
        let id = *next;
        *next += 1;
        id
    };
    j.members.push((id, dev.clone()));
    Some((
        dev,
        Member {
            name: name.to_string(),
            id,
        },
    ))
}

impl Member {
    /// The other live members of the wire.
    pub(crate) fn peers(&self) -> Vec<Device> {
        wires()
            .get(&self.name)
            .map(|j| {
                j.members
                    .iter()
                    .filter(|(id, _)| *id != self.id)
                    .map(|(_, d)| d.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Leave the wire (the model is destroyed); the wire goes when its
    /// last member does, so a new one of that name starts afresh.
    pub(crate) fn leave(&self) {
        let mut all = wires();
        if let Some(j) = all.get_mut(&self.name) {
            j.members.retain(|(id, _)| *id != self.id);
            if j.members.is_empty() {
                all.remove(&self.name);
            }
        }
    }
}
