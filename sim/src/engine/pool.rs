//! Buffers the traffic engine reuses from message to message instead of
//! allocating each time: gathered payloads, receive WQE copies, BlueFlame
//! copies and scatter plans. A buffer taken and never given back is simply
//! freed; giving back only keeps its capacity for the next message.

/// Spare buffers, by kind.
#[derive(Debug, Default)]
pub(crate) struct BufPool {
    bytes: Vec<Vec<u8>>,
    plans: Vec<Vec<(u64, u64)>>,
}

/// Spares kept per kind: enough for the buffers one message holds at once.
const KEEP: usize = 8;

impl BufPool {
    /// An empty byte buffer (with the capacity of an earlier one).
    pub fn bytes(&mut self) -> Vec<u8> {
        self.bytes.pop().unwrap_or_default()
    }

    /// `len` zero bytes.
    pub fn zeroed(&mut self, len: usize) -> Vec<u8> {
        let mut b = self.bytes();
        b.resize(len, 0);
        b
    }

    /// Keep `b`'s capacity for later.
    pub fn give_bytes(&mut self, mut b: Vec<u8>) {
        if self.bytes.len() < KEEP && b.capacity() > 0 {
            b.clear();
            self.bytes.push(b);
        }
    }

    /// An empty list of device ranges.
    pub fn plan(&mut self) -> Vec<(u64, u64)> {
        self.plans.pop().unwrap_or_default()
    }

    /// Keep `p`'s capacity for later.
    pub fn give_plan(&mut self, mut p: Vec<(u64, u64)>) {
        if self.plans.len() < KEEP && p.capacity() > 0 {
            p.clear();
            self.plans.push(p);
        }
    }
}
