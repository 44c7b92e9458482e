//! One modelled host of `mlx5 pingpong`: a device on the wire, its own
//! driver and verbs context, a send CQ, a receive CQ, an SRQ and an RC QP
//! on it, a registered buffer; its own address learned the way a program
//! on a real host learns it (`query_port`, `query_gid_table`, `add_gid`
//! for an IPv4 address), and the connect from the peer's out-of-band data
//! (rdma-core `libibverbs/examples/rc_pingpong.c` has the same shape).

use mlx5_driver::qp::Mtu;
use mlx5_driver::verbs::{
    AccessFlags, AhAttr, CqHandle, Errno, GidEntry, GidTableEntry, GidType, GlobalRoute, Mr,
    QpAttr, QpAttrMask, QpCap, QpHandle, QpInitAttr, RecvWr, Sge, SrqHandle, SrqInitAttr, Verbs,
};
use mlx5_driver::{Hca, HcaConfig};
use mlx5_hal::{DmaRegion, Hal};
use mlx5_sim::wire::Wire;
use mlx5_sim::{Device, SimHal};

use super::opts::Transport;
use crate::common::error::CliError;

/// A verbs context sized for one QP pair: 4 CQs, 2 SRQs, 16 events,
/// 2 QPs, 64 send WQEBBs per QP.
pub type Ctx = Verbs<SimHal, (), 4, 2, 16, 2, 64>;

/// Receive WQEs kept posted on each SRQ; one message is in flight each
/// way at a time, as in rc_pingpong, so a few are plenty.
pub const RECVS: usize = 8;

/// What one side hands the other out of band (rc_pingpong's exchange:
/// LID, QPN, PSN, GID; plus the MAC, since this driver has no neighbour
/// table to resolve it).
#[derive(Debug, Clone, Copy)]
pub struct Addr {
    /// The QP number.
    pub qpn: u32,
    /// The first PSN it sends.
    pub psn: u32,
    /// Its GID (RoCE: the source entry's; IB: the port GID).
    pub gid: [u8; 16],
    /// Its MAC (RoCE).
    pub mac: [u8; 6],
    /// Its LID (IB; 0 on RoCE).
    pub lid: u16,
    /// Its port's active MTU.
    pub mtu: Mtu,
}

/// One host.
pub struct Host {
    /// The device.
    pub dev: Device,
    /// Its verbs context.
    pub ctx: Ctx,
    /// The send CQ.
    pub scq: CqHandle,
    /// The receive CQ.
    pub rcq: CqHandle,
    /// The SRQ.
    pub srq: SrqHandle,
    /// The QP.
    pub qp: QpHandle,
    /// The buffer: the send area, then [`RECVS`] receive slots.
    pub buf: DmaRegion<SimHal>,
    /// Its registration (local write).
    pub mr: Option<Mr>,
    /// Bytes of the send area and of each receive slot.
    pub slot: usize,
    /// The source GID index this host sends from.
    pub sgid_index: u8,
    /// What it tells its peer.
    pub addr: Addr,
}

/// A failed verbs call: the driver's error for the firmware command
/// behind it when there is one, else the errno.
pub fn verbs_error(ctx: &Ctx, step: &str, e: Errno) -> CliError {
    match ctx.last_error() {
        Some(err) => CliError::driver(step, err),
        None => CliError::failed(
            format!("{step}: {e}"),
            "the verbs facade refused the call; docs/verbs.md lists its rules",
        ),
    }
}

impl Host {
    /// Host `n` (1 or 2) of `dev` on `wire`, brought up with `cfg`, with
    /// `slot`-byte buffers and first PSN `psn`.
    pub fn new(
        t: Transport,
        n: u8,
        dev: Device,
        wire: &Wire,
        cfg: HcaConfig,
        slot: usize,
        psn: u32,
    ) -> Result<Host, CliError> {
        let hca = Hca::bring_up(dev.hal(), cfg)
            .map_err(|e| CliError::driver(format!("host {n}: bring-up"), e))?;
        let mut ctx: Ctx = Verbs::open(hca);
        dev.connect(wire).map_err(|e| {
            CliError::failed(format!("host {n}: joining the wire: {e}"), "a model bug")
        })?;
        let step = |s: &str| format!("host {n}: {s}");
        let port = ctx
            .query_port(1)
            .map_err(|e| verbs_error(&ctx, &step("query_port"), e))?;
        let (sgid_index, gid, mac) = if t.ib() {
            let gid = ctx
                .query_gid(1, 0)
                .map_err(|e| verbs_error(&ctx, &step("query_gid"), e))?;
            (0, gid, [0; 6])
        } else {
            let mut table = [GidTableEntry {
                gid: [0; 16],
                gid_index: 0,
                port_num: 0,
                gid_type: GidType::Ib,
            }; 8];
            let k = ctx
                .query_gid_table(&mut table)
                .map_err(|e| verbs_error(&ctx, &step("query_gid_table"), e))?;
            let mac = ctx
                .query_gid_ex(1, table[0].gid_index)
                .map_err(|e| verbs_error(&ctx, &step("query_gid_ex"), e))?
                .map_or([0; 6], |g| g.mac);
            let want = if t == Transport::RoceV1 {
                GidType::RoceV1
            } else {
                GidType::RoceV2
            };
            let default = table[..k]
                .iter()
                .find(|e| e.gid_type == want)
                .ok_or_else(|| {
                    CliError::failed(
                        step("the port has no default link-local GID of that RoCE version"),
                        "bring-up programs one of each (docs/wire.md)",
                    )
                })?;
            if t == Transport::RoceV2Ipv4 {
                // The address an IP stack would have given the interface.
                let index = ctx.hca().default_gid_count();
                let gid = mlx5_driver::gid::ipv4_gid([198, 18, 0, n]);
                let entry = GidEntry {
                    gid,
                    gid_type: GidType::RoceV2,
                    mac,
                    vlan: None,
                };
                ctx.add_gid(1, index, &entry)
                    .map_err(|e| verbs_error(&ctx, &step("add_gid"), e))?;
                (index as u8, gid, mac)
            } else {
                (default.gid_index as u8, default.gid, mac)
            }
        };
        let cq = |ctx: &mut Ctx| {
            ctx.create_cq(63)
                .map(|(h, _)| h)
                .map_err(|e| verbs_error(ctx, &step("create_cq"), e))
        };
        let scq = cq(&mut ctx)?;
        let rcq = cq(&mut ctx)?;
        let (srq, _) = ctx
            .create_srq(&SrqInitAttr {
                max_wr: RECVS as u32,
                max_sge: 1,
                srq_limit: 0,
                cq: Some(rcq),
            })
            .map_err(|e| verbs_error(&ctx, &step("create_srq"), e))?;
        let (qp, _) = ctx
            .create_qp(&QpInitAttr {
                send_cq: scq,
                recv_cq: rcq,
                srq: Some(srq),
                cap: QpCap {
                    max_send_wr: 8,
                    max_send_sge: 1,
                    ..QpCap::default()
                },
                sq_sig_all: false,
            })
            .map_err(|e| verbs_error(&ctx, &step("create_qp"), e))?;
        let bytes = slot * (1 + RECVS);
        let buf = dev.hal().alloc_dma(bytes).map_err(|e| {
            CliError::failed(
                step(&format!("allocating {bytes} bytes of DMA memory: {e:?}")),
                "use a smaller --size, or a larger --dma-limit",
            )
        })?;
        let mr = ctx
            .reg_mr(buf.iova(), bytes as u64, AccessFlags::LOCAL_WRITE)
            .map_err(|e| verbs_error(&ctx, &step("reg_mr"), e))?;
        let addr = Addr {
            qpn: ctx.qp_num(qp).unwrap_or(0),
            psn,
            gid,
            mac,
            lid: port.lid,
            mtu: port.active_mtu,
        };
        Ok(Host {
            dev,
            ctx,
            scq,
            rcq,
            srq,
            qp,
            buf,
            mr: Some(mr),
            slot,
            sgid_index,
            addr,
        })
    }

    /// The buffer's local key.
    pub fn lkey(&self) -> u32 {
        self.mr.as_ref().map_or(0, Mr::lkey)
    }

    /// Post receive WQE `i` (receive slot `i`).
    pub fn post_recv(&mut self, i: usize) -> Result<(), CliError> {
        let sg = [Sge {
            addr: self.buf.iova() + (self.slot * (1 + i)) as u64,
            length: self.slot as u32,
            lkey: self.lkey(),
        }];
        let wr = RecvWr {
            wr_id: i as u64,
            sges: &sg,
        };
        self.ctx
            .post_srq_recv(self.srq, &[wr])
            .map_err(|e| verbs_error(&self.ctx, "post_srq_recv", e.errno))
    }

    /// The address vector toward `peer`: the peer's GID (and MAC) on RoCE,
    /// its LID on IB. Hop limit 1 is what rc_pingpong asks for; the
    /// driver makes it 64 as Linux does.
    pub fn ah_to(&self, t: Transport, peer: &Addr) -> AhAttr {
        if t.ib() {
            return AhAttr {
                dlid: peer.lid,
                port_num: 1,
                ..AhAttr::default()
            };
        }
        AhAttr {
            is_global: true,
            grh: GlobalRoute {
                dgid: peer.gid,
                flow_label: 0,
                sgid_index: self.sgid_index,
                hop_limit: 1,
                traffic_class: 0,
            },
            port_num: 1,
            dmac: Some(peer.mac),
            ..AhAttr::default()
        }
    }

    /// RESET → INIT → RTR (toward `peer`) → RTS with rc_pingpong's values
    /// (min_rnr_timer 12, timeout 14, retry_cnt 7, rnr_retry 7).
    pub fn connect(&mut self, ah: AhAttr, peer: &Addr, mtu: Mtu) -> Result<(), CliError> {
        let base = QpAttr {
            port_num: 1,
            pkey_index: 0,
            qp_access_flags: AccessFlags::LOCAL_WRITE,
            ah_attr: ah,
            path_mtu: mtu,
            dest_qp_num: peer.qpn,
            rq_psn: peer.psn,
            sq_psn: self.addr.psn,
            min_rnr_timer: 12,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
            ..QpAttr::default()
        };
        for (state, mask) in QpAttrMask::RC_CONNECT {
            let a = QpAttr {
                qp_state: state,
                ..base
            };
            self.ctx
                .modify_qp(self.qp, &a, mask)
                .map_err(|e| verbs_error(&self.ctx, &format!("modify_qp to {state:?}"), e))?;
        }
        Ok(())
    }

    /// Destroy everything and close the context; then the model must hold
    /// no page and no object.
    pub fn close(mut self, n: u8) -> Result<(), CliError> {
        let step = |s: &str| format!("host {n}: {s}");
        let ctx = &mut self.ctx;
        ctx.destroy_qp(self.qp)
            .map_err(|e| verbs_error(ctx, &step("destroy_qp"), e))?;
        ctx.destroy_srq(self.srq)
            .map_err(|e| verbs_error(ctx, &step("destroy_srq"), e))?;
        for cq in [self.scq, self.rcq] {
            ctx.destroy_cq(cq)
                .map_err(|e| verbs_error(ctx, &step("destroy_cq"), e))?;
        }
        if let Some(mr) = self.mr.take() {
            ctx.dereg_mr(mr)
                .map_err(|(_, e)| verbs_error(ctx, &step("dereg_mr"), e))?;
        }
        drop(self.buf);
        if let Err(e) = self.ctx.close() {
            return Err(CliError::failed(
                step(&format!("closing the verbs context: {e}")),
                "teardown failed; the model's trace (mlx5 trace) shows the command",
            ));
        }
        let (pages, objects) = (self.dev.pages_held(), self.dev.objects().total());
        if pages != 0 || objects != 0 {
            return Err(CliError::check(step(&format!(
                "after teardown the model still holds {pages} pages and {objects} objects"
            ))));
        }
        Ok(())
    }
}
