//! Two QPs connected for RDMA READ and atomics through the facade, with one
//! registered buffer: the harness of the READ/atomic tests (`verbs_rdma`,
//! `verbs_rdma_wire`, `mr_protect_rd`).

use crate::verbs_common::*;

use mlx5_driver::verbs::{
    AccessFlags, CqHandle, Errno, Mr, QpAttr, QpAttrMask, QpCap, QpHandle, QpInitAttr, SendFlags,
    SendWr, Sge, SrqHandle, SrqInitAttr, WrOpcode,
};
use mlx5_hal::{DmaRegion, Hal};
use mlx5_sim::{Device, SimHal};

/// Bytes of the pair's buffer: source area, then destination area.
pub const RD_BUF: usize = 4 << 20;
/// Offset of the destination area.
pub const DST: usize = 2 << 20;

/// Every right a remote peer can have.
pub const ALL: AccessFlags = AccessFlags(
    AccessFlags::LOCAL_WRITE.0
        | AccessFlags::REMOTE_WRITE.0
        | AccessFlags::REMOTE_READ.0
        | AccessFlags::REMOTE_ATOMIC.0,
);

/// Two connected QPs (on an SRQ or with their own receive queues) and one
/// buffer registered with `mr_access`.
pub struct RdPair {
    /// The send CQ of both QPs.
    pub scq: CqHandle,
    /// The receive CQ of both QPs.
    pub rcq: CqHandle,
    srq: Option<SrqHandle>,
    /// The requester.
    pub a: QpHandle,
    /// The responder.
    pub b: QpHandle,
    /// The registered buffer (source area, then destination area at [`DST`]).
    pub buf: DmaRegion<SimHal>,
    mr: Option<Mr>,
}

/// RESET → INIT → RTR → RTS of `qp` toward `peer` on `ah`, with the QP
/// rights `access` and `depth` reads/atomics each way.
pub fn connect_rd(
    ctx: &mut Ctx,
    qp: QpHandle,
    peer: u32,
    ah: mlx5_driver::verbs::AhAttr,
    access: AccessFlags,
    depth: u8,
) -> Result<(), Errno> {
    let base = QpAttr {
        port_num: 1,
        qp_access_flags: access,
        ah_attr: ah,
        path_mtu: mlx5_driver::verbs::Mtu::B1024,
        dest_qp_num: peer,
        min_rnr_timer: 12,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: depth,
        max_dest_rd_atomic: depth,
        ..QpAttr::default()
    };
    for (state, mask) in QpAttrMask::RC_CONNECT {
        ctx.modify_qp(
            qp,
            &QpAttr {
                qp_state: state,
                ..base
            },
            mask,
        )?;
    }
    Ok(())
}

impl RdPair {
    /// A pair with every QP right and 4 reads/atomics each way.
    pub fn new(dev: &Device, ctx: &mut Ctx, own_rq: bool, mr_access: AccessFlags) -> RdPair {
        RdPair::with(dev, ctx, own_rq, mr_access, ALL, 4)
    }

    /// A pair with QP rights `qp_access` and `depth` reads/atomics each way.
    pub fn with(
        dev: &Device,
        ctx: &mut Ctx,
        own_rq: bool,
        mr_access: AccessFlags,
        qp_access: AccessFlags,
        depth: u8,
    ) -> RdPair {
        let (scq, _) = ctx.create_cq(1023).unwrap();
        let (rcq, _) = ctx.create_cq(255).unwrap();
        let srq = (!own_rq).then(|| {
            ctx.create_srq(&SrqInitAttr {
                max_wr: 15,
                max_sge: 1,
                srq_limit: 0,
                cq: Some(rcq),
            })
            .unwrap()
            .0
        });
        let attr = QpInitAttr {
            send_cq: scq,
            recv_cq: rcq,
            srq,
            cap: QpCap {
                max_send_wr: 64,
                max_send_sge: 4,
                max_recv_wr: if own_rq { 16 } else { 0 },
                max_recv_sge: if own_rq { 1 } else { 0 },
                max_inline_data: 0,
            },
            sq_sig_all: false,
        };
        let (a, _) = ctx.create_qp(&attr).unwrap();
        let (b, _) = ctx.create_qp(&attr).unwrap();
        let buf = dev.hal().alloc_dma(RD_BUF).unwrap();
        let mr = ctx.reg_mr(buf.iova(), RD_BUF as u64, mr_access).unwrap();
        let ah = ctx.loopback_ah().unwrap();
        let (qa, qb) = (ctx.qp_num(a).unwrap(), ctx.qp_num(b).unwrap());
        connect_rd(ctx, a, qb, ah, qp_access, depth).unwrap();
        connect_rd(ctx, b, qa, ah, qp_access, depth).unwrap();
        RdPair {
            scq,
            rcq,
            srq,
            a,
            b,
            buf,
            mr: Some(mr),
        }
    }

    /// The buffer's local key.
    pub fn lkey(&self) -> u32 {
        self.mr.as_ref().unwrap().lkey()
    }

    /// The buffer's remote key.
    pub fn rkey(&self) -> u32 {
        self.mr.as_ref().unwrap().rkey()
    }

    /// I/O address of offset `off` of the buffer.
    pub fn at(&self, off: usize) -> u64 {
        self.buf.iova() + off as u64
    }

    /// A gather entry over `len` bytes at `off`.
    pub fn sge(&self, off: usize, len: u32) -> Sge {
        Sge {
            addr: self.at(off),
            length: len,
            lkey: self.lkey(),
        }
    }

    /// The native-endian 8 bytes at `off`.
    pub fn u64_at(&self, off: usize) -> u64 {
        let mut b = [0u8; 8];
        self.buf.read_bytes(off, &mut b);
        u64::from_ne_bytes(b)
    }

    /// Store `v` native-endian at `off`.
    pub fn set_u64(&self, off: usize, v: u64) {
        self.buf.write_bytes(off, &v.to_ne_bytes());
    }

    /// Tear the pair down, async events acknowledged.
    pub fn destroy(mut self, ctx: &mut Ctx) {
        while let Ok(ev) = ctx.get_async_event() {
            ctx.ack_async_event(&ev).unwrap();
        }
        ctx.destroy_qp(self.a).unwrap();
        ctx.destroy_qp(self.b).unwrap();
        if let Some(s) = self.srq {
            ctx.destroy_srq(s).unwrap();
        }
        ctx.destroy_cq(self.scq).unwrap();
        ctx.destroy_cq(self.rcq).unwrap();
        ctx.dereg_mr(self.mr.take().unwrap())
            .map_err(|(_, e)| e)
            .unwrap();
    }
}

/// A signaled READ of `len` bytes at `raddr` into `sges`.
pub fn read_wr<'a>(wr_id: u64, sges: &'a [Sge], raddr: u64, rkey: u32) -> SendWr<'a> {
    SendWr {
        wr_id,
        opcode: WrOpcode::RdmaRead,
        send_flags: SendFlags::SIGNALED,
        sg_list: sges,
        remote_addr: raddr,
        rkey,
        ..SendWr::EMPTY
    }
}

/// A signaled atomic on `raddr` whose original value lands in `result`.
pub fn atomic_wr<'a>(
    wr_id: u64,
    opcode: WrOpcode,
    result: &'a [Sge],
    raddr: u64,
    rkey: u32,
    compare_add: u64,
    swap: u64,
) -> SendWr<'a> {
    SendWr {
        wr_id,
        opcode,
        send_flags: SendFlags::SIGNALED,
        sg_list: result,
        remote_addr: raddr,
        rkey,
        compare_add,
        swap,
        ..SendWr::EMPTY
    }
}

/// Post `wr` on the requester and return its one completion.
pub fn one(
    dev: &Device,
    ctx: &mut Ctx,
    p: &RdPair,
    wr: SendWr<'_>,
) -> mlx5_driver::verbs::WorkCompletion {
    ctx.post_send(p.a, &[wr]).unwrap();
    let wcs = poll_n(dev, ctx, p.scq, 1);
    assert_eq!(wcs.len(), 1, "one completion");
    wcs[0]
}
