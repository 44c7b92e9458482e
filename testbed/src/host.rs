//! One modelled host: bring-up, its own address, the QP and its buffer,
//! the connect toward a peer, teardown with the model checked clean.

use mlx5_driver::qp::Mtu;
use mlx5_driver::verbs::{
    AccessFlags, AhAttr, CqHandle, Errno, GidEntry, GidTableEntry, GidType, GlobalRoute, Mr,
    PortAttr, QpAttr, QpAttrMask, QpCap, QpHandle, QpInitAttr, RecvWr, Sge, SrqHandle, SrqInitAttr,
    Verbs, WorkCompletion,
};
use mlx5_driver::{Hca, HcaConfig};
use mlx5_hal::{DmaRegion, Hal};
use mlx5_sim::wire::Wire;
use mlx5_sim::{Device, SimHal};

use crate::{Cause, RecvQueue, SetupError, Transport};

/// A host's verbs context: 4 CQs, 2 SRQs, 16 events, 16 QPs (the RC QP
/// and the UD QPs a test or `ud_pingpong` adds), 64 send WQEBBs per QP.
pub type Ctx = Verbs<SimHal, (), 4, 2, 16, 16, 64>;

/// What one host is made of.
#[derive(Debug, Clone, Copy)]
pub struct HostSpec {
    /// How it reaches its peer.
    pub transport: Transport,
    /// Its number: 1 or 2 (its IPv4 address is `198.18.0.N`).
    pub n: u8,
    /// The first PSN it sends.
    pub psn: u32,
    /// Bytes of each area of the buffer (the send area, the target area of
    /// the peer's RDMA WRITE, READ and atomics, and each receive slot).
    pub slot: usize,
    /// Receive WQEs (and receive slots).
    pub recvs: usize,
    /// Entries of each CQ.
    pub cq_entries: u32,
    /// The QP's `max_send_wr`.
    pub send_wr: u32,
    /// Where the QP receives.
    pub rq: RecvQueue,
    /// The buffer's registration rights, also the QP's access flags.
    pub access: AccessFlags,
}

impl HostSpec {
    /// Host `n` over `transport` with rc_pingpong's shape: 1-byte areas, 8
    /// receive WQEs on an SRQ, 64-entry CQs, 8 send WQEs, local write only.
    pub fn new(transport: Transport, n: u8, psn: u32) -> HostSpec {
        HostSpec {
            transport,
            n,
            psn,
            slot: 1,
            recvs: 8,
            cq_entries: 63,
            send_wr: 8,
            rq: RecvQueue::Srq,
            access: AccessFlags::LOCAL_WRITE,
        }
    }

    /// The buffer's offset of the send area.
    pub fn send_at(&self) -> usize {
        0
    }

    /// The buffer's offset of the area the peer's RDMA operations target.
    pub fn target_at(&self) -> usize {
        self.slot
    }

    /// The buffer's offset of receive slot `i`.
    pub fn recv_at(&self, i: usize) -> usize {
        self.slot * (2 + i)
    }

    /// Bytes of the buffer.
    pub fn buf_len(&self) -> usize {
        self.slot * (2 + self.recvs)
    }
}

/// What one side hands the other out of band (rc_pingpong's exchange:
/// LID, QPN, PSN, GID; plus the MAC, since this driver has no neighbour
/// table to resolve it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Addr {
    /// The QP number.
    pub qpn: u32,
    /// The first PSN it sends.
    pub psn: u32,
    /// Its GID (RoCE: the source entry's; IB: the port GID).
    pub gid: [u8; 16],
    /// Its MAC (RoCE; zero on IB).
    pub mac: [u8; 6],
    /// Its LID (IB; 0 on RoCE).
    pub lid: u16,
    /// Its port's active MTU.
    pub mtu: Mtu,
    /// Its buffer's address (for the peer's RDMA operations).
    pub addr: u64,
    /// Its buffer's remote key.
    pub rkey: u32,
}

/// The attributes of the RESET → INIT → RTR → RTS transitions that are a
/// choice; the defaults are rc_pingpong's (min_rnr_timer 12, timeout 14,
/// retry_cnt 7, rnr_retry 7, one outstanding READ/atomic each way).
#[derive(Debug, Clone, Copy)]
pub struct ConnectOpts {
    /// The path MTU.
    pub mtu: Mtu,
    /// The P_Key index.
    pub pkey_index: u16,
    /// The RNR NAK timer the responder asks for.
    pub min_rnr_timer: u8,
    /// The ACK timeout exponent (4.096 µs × 2^timeout).
    pub timeout: u8,
    /// Retries after a timeout or a sequence error.
    pub retry_cnt: u8,
    /// Retries after an RNR NAK (7: without limit).
    pub rnr_retry: u8,
    /// READ/atomic requests outstanding as requester.
    pub max_rd_atomic: u8,
    /// READ/atomic requests outstanding as responder.
    pub max_dest_rd_atomic: u8,
}

impl ConnectOpts {
    /// rc_pingpong's values at path MTU `mtu`.
    pub fn new(mtu: Mtu) -> ConnectOpts {
        ConnectOpts {
            mtu,
            pkey_index: 0,
            min_rnr_timer: 12,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
        }
    }
}

/// One host: a device on the wire, its verbs context, two CQs, an RC QP
/// on its own receive queue or an SRQ, one registered buffer.
pub struct Host {
    /// The device.
    pub dev: Device,
    /// Its verbs context (boxed: it is large).
    pub ctx: Box<Ctx>,
    /// What it is made of.
    pub spec: HostSpec,
    /// The port as `query_port` reported it at setup.
    pub port: PortAttr,
    /// The send CQ.
    pub scq: CqHandle,
    /// The receive CQ.
    pub rcq: CqHandle,
    /// The SRQ ([`RecvQueue::Srq`] only).
    pub srq: Option<SrqHandle>,
    /// The QP.
    pub qp: QpHandle,
    /// The buffer ([`HostSpec::buf_len`] bytes).
    pub buf: DmaRegion<SimHal>,
    /// Its registration.
    pub mr: Option<Mr>,
    /// The source GID index this host sends from.
    pub sgid_index: u8,
    /// What it tells its peer.
    pub addr: Addr,
}

fn model(step: String, m: impl Into<String>) -> SetupError {
    SetupError {
        step,
        cause: Cause::Model(m.into()),
    }
}

fn verbs(ctx: &Ctx, step: String, errno: Errno) -> SetupError {
    SetupError {
        step,
        cause: Cause::Verbs {
            errno,
            driver: ctx.last_error(),
        },
    }
}

impl Host {
    /// Bring `dev` up with `cfg` (an InfiniBand transport configures the
    /// VPI port for InfiniBand first), join `wire`, learn the port's
    /// address and create what `spec` asks for.
    pub fn new(
        dev: Device,
        wire: &Wire,
        cfg: HcaConfig,
        spec: HostSpec,
    ) -> Result<Host, SetupError> {
        let n = spec.n;
        let t = spec.transport;
        let step = |s: &str| format!("host {n}: {s}");
        if t.ib() {
            // A VPI card whose port is configured for InfiniBand.
            dev.caps_mut(|c| c.port_type = 0);
        }
        let hca = Hca::bring_up(dev.hal(), cfg).map_err(|e| SetupError {
            step: step("bring-up"),
            cause: Cause::BringUp(e),
        })?;
        let mut ctx: Box<Ctx> = Box::new(Verbs::open(hca));
        dev.connect(wire)
            .map_err(|e| model(step("joining the wire"), e.to_string()))?;
        let port = ctx
            .query_port(1)
            .map_err(|e| verbs(&ctx, step("query_port"), e))?;
        let (sgid_index, gid, mac) = own_address(&mut ctx, t, n).map_err(|(s, e)| {
            if s.is_empty() {
                model(step("the port's GID table"), e.to_string())
            } else {
                verbs(&ctx, step(s), e)
            }
        })?;
        let e = |ctx: &Ctx, s: &str, errno| verbs(ctx, step(s), errno);
        let (scq, _) = ctx
            .create_cq(spec.cq_entries)
            .map_err(|x| e(&ctx, "create_cq", x))?;
        let (rcq, _) = ctx
            .create_cq(spec.cq_entries)
            .map_err(|x| e(&ctx, "create_cq", x))?;
        let srq = match spec.rq {
            RecvQueue::Own => None,
            RecvQueue::Srq => Some(
                ctx.create_srq(&SrqInitAttr {
                    max_wr: spec.recvs as u32,
                    max_sge: 1,
                    srq_limit: 0,
                    cq: Some(rcq),
                })
                .map_err(|x| e(&ctx, "create_srq", x))?
                .0,
            ),
        };
        let own = spec.rq == RecvQueue::Own;
        let (qp, _) = ctx
            .create_qp(&QpInitAttr {
                send_cq: scq,
                recv_cq: rcq,
                srq,
                cap: QpCap {
                    max_send_wr: spec.send_wr,
                    max_send_sge: 1,
                    max_recv_wr: if own { spec.recvs as u32 } else { 0 },
                    max_recv_sge: u32::from(own),
                    ..QpCap::default()
                },
                sq_sig_all: false,
            })
            .map_err(|x| e(&ctx, "create_qp", x))?;
        let bytes = spec.buf_len();
        let buf = dev.hal().alloc_dma(bytes).map_err(|x| {
            model(
                step(&format!("allocating {bytes} bytes of DMA memory")),
                format!("{x:?}"),
            )
        })?;
        let mr = ctx
            .reg_mr(buf.iova(), bytes as u64, spec.access)
            .map_err(|x| e(&ctx, "reg_mr", x))?;
        let addr = Addr {
            qpn: ctx.qp_num(qp).map_err(|x| e(&ctx, "qp_num", x))?,
            psn: spec.psn,
            gid,
            mac,
            lid: port.lid,
            mtu: port.active_mtu,
            addr: buf.iova(),
            rkey: mr.rkey(),
        };
        Ok(Host {
            dev,
            ctx,
            spec,
            port,
            scq,
            rcq,
            srq,
            qp,
            buf,
            mr: Some(mr),
            sgid_index,
            addr,
        })
    }

    /// The buffer's local key.
    pub fn lkey(&self) -> u32 {
        self.mr.as_ref().map_or(0, Mr::lkey)
    }

    /// The buffer's remote key.
    pub fn rkey(&self) -> u32 {
        self.mr.as_ref().map_or(0, Mr::rkey)
    }

    /// Post receive WQE `i` (receive slot `i`, `wr_id` `i`) on the QP's
    /// own receive queue or its SRQ.
    pub fn post_recv(&mut self, i: usize) -> Result<(), SetupError> {
        let sg = [Sge {
            addr: self.buf.iova() + self.spec.recv_at(i) as u64,
            length: self.spec.slot as u32,
            lkey: self.lkey(),
        }];
        let wr = [RecvWr {
            wr_id: i as u64,
            sges: &sg,
        }];
        let (what, res) = match self.srq {
            Some(srq) => (
                "post_srq_recv",
                self.ctx.post_srq_recv(srq, &wr).map_err(|e| e.errno),
            ),
            None => (
                "post_recv",
                self.ctx.post_recv(self.qp, &wr).map_err(|e| e.errno),
            ),
        };
        res.map_err(|e| verbs(&self.ctx, format!("host {}: {what}", self.spec.n), e))
    }

    /// The address vector toward `peer`: its GID (and MAC) on RoCE, its
    /// LID on IB (and its GID with [`Transport::IbGrh`]). Hop limit 1 is
    /// what rc_pingpong asks for; the driver makes it 64 as Linux does.
    pub fn ah_to(&self, peer: &Addr) -> AhAttr {
        let grh = GlobalRoute {
            dgid: peer.gid,
            flow_label: 0,
            sgid_index: self.sgid_index,
            hop_limit: 1,
            traffic_class: 0,
        };
        match self.spec.transport {
            Transport::IbLid => AhAttr {
                dlid: peer.lid,
                port_num: 1,
                ..AhAttr::default()
            },
            Transport::IbGrh => AhAttr {
                dlid: peer.lid,
                is_global: true,
                grh: GlobalRoute {
                    hop_limit: 64,
                    ..grh
                },
                port_num: 1,
                ..AhAttr::default()
            },
            // Reached by its link-local GID, from which the MAC derives.
            Transport::RoceV2Ipv6 => AhAttr {
                is_global: true,
                grh,
                port_num: 1,
                ..AhAttr::default()
            },
            Transport::RoceV2Ipv4 | Transport::RoceV1 => AhAttr {
                is_global: true,
                grh,
                port_num: 1,
                dmac: Some(peer.mac),
                ..AhAttr::default()
            },
        }
    }

    /// RESET → INIT → RTR (toward `peer` by `ah`) → RTS with `opts`.
    pub fn connect(
        &mut self,
        ah: AhAttr,
        peer: &Addr,
        opts: &ConnectOpts,
    ) -> Result<(), SetupError> {
        self.connect_qp(self.qp, self.addr.psn, ah, peer, opts)
    }

    /// [`Host::connect`] for another RC QP of this host's context (one of
    /// several on the SRQ), whose first PSN is `sq_psn`.
    pub fn connect_qp(
        &mut self,
        qp: QpHandle,
        sq_psn: u32,
        ah: AhAttr,
        peer: &Addr,
        opts: &ConnectOpts,
    ) -> Result<(), SetupError> {
        let base = QpAttr {
            port_num: 1,
            pkey_index: opts.pkey_index,
            qp_access_flags: self.spec.access,
            ah_attr: ah,
            path_mtu: opts.mtu,
            dest_qp_num: peer.qpn,
            rq_psn: peer.psn,
            sq_psn,
            min_rnr_timer: opts.min_rnr_timer,
            timeout: opts.timeout,
            retry_cnt: opts.retry_cnt,
            rnr_retry: opts.rnr_retry,
            max_rd_atomic: opts.max_rd_atomic,
            max_dest_rd_atomic: opts.max_dest_rd_atomic,
            ..QpAttr::default()
        };
        for (state, mask) in QpAttrMask::RC_CONNECT {
            let a = QpAttr {
                qp_state: state,
                ..base
            };
            self.ctx.modify_qp(qp, &a, mask).map_err(|e| {
                let step = format!("host {}: modify_qp to {state:?}", self.spec.n);
                verbs(&self.ctx, step, e)
            })?;
        }
        Ok(())
    }

    /// Poll the send (or receive) CQ for one completion, letting `step_us`
    /// of device time pass on this host and on `other` between polls, at
    /// most `steps` times (`None` then).
    pub fn wait_one(
        &mut self,
        send: bool,
        other: &Device,
        step_us: u64,
        steps: u64,
    ) -> Result<Option<WorkCompletion>, SetupError> {
        let cq = if send { self.scq } else { self.rcq };
        let mut wc = [WorkCompletion::EMPTY; 1];
        for _ in 0..steps {
            let n = self
                .ctx
                .poll_cq(cq, &mut wc)
                .map_err(|e| verbs(&self.ctx, format!("host {}: poll_cq", self.spec.n), e))?;
            if n == 1 {
                return Ok(Some(wc[0]));
            }
            self.dev.advance_us(step_us);
            other.advance_us(step_us);
        }
        Ok(None)
    }

    /// Destroy everything and close the context; then the model must hold
    /// no page, no object and no GID entry, and RoCE must be off again.
    /// The device is handed back for further checks.
    pub fn close(mut self) -> Result<Device, SetupError> {
        let n = self.spec.n;
        let step = |s: &str| format!("host {n}: {s}");
        let ctx = &mut self.ctx;
        ctx.destroy_qp(self.qp)
            .map_err(|e| verbs(ctx, step("destroy_qp"), e))?;
        if let Some(srq) = self.srq {
            ctx.destroy_srq(srq)
                .map_err(|e| verbs(ctx, step("destroy_srq"), e))?;
        }
        for cq in [self.scq, self.rcq] {
            ctx.destroy_cq(cq)
                .map_err(|e| verbs(ctx, step("destroy_cq"), e))?;
        }
        if let Some(mr) = self.mr.take() {
            ctx.dereg_mr(mr)
                .map_err(|(_, e)| verbs(ctx, step("dereg_mr"), e))?;
        }
        drop(self.buf);
        if let Err(e) = (*self.ctx).close() {
            return Err(SetupError {
                step: step("closing the verbs context"),
                cause: Cause::Verbs {
                    errno: e,
                    driver: None,
                },
            });
        }
        let dev = self.dev;
        let (pages, objects) = (dev.pages_held(), dev.objects().total());
        if pages != 0 || objects != 0 {
            return Err(model(
                step("teardown"),
                format!("the model still holds {pages} pages and {objects} objects"),
            ));
        }
        if !dev.gid_entries().is_empty() || dev.roce_enabled() {
            return Err(model(
                step("teardown"),
                "GID entries left or RoCE still enabled",
            ));
        }
        Ok(dev)
    }
}

/// A source GID index, its GID and its MAC.
type OwnAddress = (u8, [u8; 16], [u8; 6]);

/// The source GID index, the GID and the MAC host `n` sends from over
/// `t`: the port GID on IB; on RoCE one of bring-up's default link-local
/// GIDs, or an IPv4-mapped GID it adds as an IP stack would. An empty step
/// name means the table lacks the entry.
fn own_address(ctx: &mut Ctx, t: Transport, n: u8) -> Result<OwnAddress, (&'static str, Errno)> {
    if t.ib() {
        let gid = ctx.query_gid(1, 0).map_err(|e| ("query_gid", e))?;
        return Ok((0, gid, [0; 6]));
    }
    let mut table = [GidTableEntry {
        gid: [0; 16],
        gid_index: 0,
        port_num: 0,
        gid_type: GidType::Ib,
    }; 8];
    let k = ctx
        .query_gid_table(&mut table)
        .map_err(|e| ("query_gid_table", e))?;
    let mac = ctx
        .query_gid_ex(1, table[0].gid_index)
        .map_err(|e| ("query_gid_ex", e))?
        .map_or([0; 6], |g| g.mac);
    let want = if t == Transport::RoceV1 {
        GidType::RoceV1
    } else {
        GidType::RoceV2
    };
    let default = table[..k]
        .iter()
        .find(|e| e.gid_type == want)
        .ok_or(("", Errno::ENOENT))?;
    if t != Transport::RoceV2Ipv4 {
        return Ok((default.gid_index as u8, default.gid, mac));
    }
    // The address an IP stack would have given the interface.
    let index = ctx.hca().default_gid_count();
    let gid = mlx5_driver::gid::ipv4_gid([198, 18, 0, n]);
    let entry = GidEntry {
        gid,
        gid_type: GidType::RoceV2,
        mac,
        vlan: None,
    };
    ctx.add_gid(1, index, &entry).map_err(|e| ("add_gid", e))?;
    Ok((index as u8, gid, mac))
}
