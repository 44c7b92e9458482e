//! The device's port on a wire: joining it, pumping it, the P_Key table
//! its packets are checked against, and the endpoint the wire calls when a
//! frame waits for this port (`docs/wire.md`).

use std::sync::Arc;

use crate::{wire, Device, Shared, SimError};

impl Device {
    /// Join the port to `wire` (a device has one port). Frames the port
    /// sends go on the wire; frames arriving are checked and processed as a
    /// card does (`docs/wire.md`). Traffic whose path leads back to this
    /// function still loops inside it. The wire's link type must match the
    /// port type; a port joins one wire, once.
    pub fn connect(&self, wire: &wire::Wire) -> Result<wire::PortId, SimError> {
        let mut st = self.lock();
        let ib = st.caps.port_type == mlx5_regs::consts::port::TYPE_IB;
        if ib != (wire.link() == wire::LinkType::Infiniband) {
            return Err(SimError::BadState(
                "the wire's link type does not match the port type",
            ));
        }
        if self.shared.wire.set(wire.clone()).is_err() {
            return Err(SimError::BadState("the port is already on a wire"));
        }
        let id = wire.connect(st.port.lid);
        let me: std::sync::Weak<dyn wire::Endpoint> =
            Arc::downgrade(&(self.shared.clone() as Arc<dyn wire::Endpoint>));
        wire.set_endpoint(id, me);
        st.port.wire = Some((wire.clone(), id));
        Ok(id)
    }

    /// Let the wire deliver what is waiting (every device on it processes
    /// its frames); called after each doorbell and clock step.
    pub(crate) fn pump_wire(&self) {
        if let Some(w) = self.shared.wire.get() {
            w.pump();
        }
    }

    /// Program entry `index` of the port's P_Key table (entry 0 holds
    /// 0xffff at power-on; the others are invalid). Packets carry the key
    /// of their QP's `pkey_index`; receivers drop a key that does not match.
    pub fn set_pkey(&self, index: u16, pkey: u16) {
        self.lock().port.pkeys.insert(index, pkey);
    }

    /// Set the operational MTU of an InfiniBand port (what the subnet
    /// manager negotiated; PMTU `oper_mtu`): 256, 512, 1024, 2048 or 4096
    /// bytes. QPs asking for a larger path MTU are refused from then on
    /// (INIT2RTR `BAD_PARAM_ERR`, syndrome QP_MTU).
    pub fn set_ib_port_mtu(&self, bytes: u16) -> Result<(), SimError> {
        let mut st = self.lock();
        if st.caps.port_type != mlx5_regs::consts::port::TYPE_IB {
            return Err(SimError::BadState("not an InfiniBand port"));
        }
        if !matches!(bytes, 256 | 512 | 1024 | 2048 | 4096) {
            return Err(SimError::BadState(
                "not an IB MTU (256..=4096, a power of two)",
            ));
        }
        st.port.ib_mtu = bytes;
        Ok(())
    }
}

impl wire::Endpoint for Shared {
    fn poll_wire(&self) {
        let Some(w) = self.wire.get() else {
            return;
        };
        let mut st = self.lock();
        let Some((_, port)) = st.port.wire.as_ref().map(|(w, p)| (w.clone(), *p)) else {
            return;
        };
        let link = w.link();
        let mut buf = std::mem::take(&mut st.port.rx_buf);
        while w.recv(port, &mut buf) {
            st.wire_receive(&buf, link);
        }
        st.port.rx_buf = buf;
        drop(st);
        self.cv.notify_all();
    }
}
