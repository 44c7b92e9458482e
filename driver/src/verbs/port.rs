//! Ports and their address tables: `ibv_query_port`, `ibv_query_gid`,
//! `ibv_query_gid_table`, `ibv_query_pkey`, and the mlx5 extensions that
//! add and delete GID entries (a driver without an IP stack has no netdev
//! events to fill the table from; [`crate::gid`]).

use mlx5_hal::Hal;

use super::{Errno, Verbs};
use crate::gid::{GidEntry, GidType};
use crate::port::PortAttr;
use crate::stats::CmdObserver;

/// One entry of `ibv_query_gid_table` (`ibv_gid_entry` without the netdev
/// index, which a driver without a kernel has not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GidTableEntry {
    /// The GID.
    pub gid: [u8; 16],
    /// Its index in the table.
    pub gid_index: u16,
    /// The port, 1-based.
    pub port_num: u8,
    /// Its kind.
    pub gid_type: GidType,
}

impl<
        H: Hal,
        O: CmdObserver,
        const CQS: usize,
        const SRQS: usize,
        const EVENTS: usize,
        const QPS: usize,
        const SQ_WQEBBS: usize,
    > Verbs<H, O, CQS, SRQS, EVENTS, QPS, SQ_WQEBBS>
{
    fn check_port_num(&mut self, port_num: u8) -> Result<(), Errno> {
        if port_num == 0 || port_num > self.hca.caps().num_ports.max(1) {
            return Err(self.refuse("port outside 1..=num_ports"));
        }
        Ok(())
    }

    /// `ibv_query_port`: state, MTUs, link layer, LID and subnet manager
    /// (InfiniBand), GID and P_Key table sizes, as the device reports them
    /// now. `EINVAL` for a port the device does not have.
    pub fn query_port(&mut self, port_num: u8) -> Result<PortAttr, Errno> {
        self.check_port_num(port_num)?;
        Ok(self.hca.query_port(port_num)?)
    }

    /// `ibv_query_gid`: the GID at `index` of port `port_num`; an empty
    /// entry reads as all zeros, as in libibverbs. `EINVAL` for an index
    /// beyond the table (`gid_tbl_len`).
    pub fn query_gid(&mut self, port_num: u8, index: u16) -> Result<[u8; 16], Errno> {
        Ok(self
            .query_gid_ex(port_num, index)?
            .map_or([0; 16], |e| e.gid))
    }

    /// `ibv_query_gid_ex`: the whole entry at `index` (type, MAC, VLAN);
    /// `None` for an empty entry (libibverbs: `ENODATA`).
    pub fn query_gid_ex(&mut self, port_num: u8, index: u16) -> Result<Option<GidEntry>, Errno> {
        self.check_port_num(port_num)?;
        if index >= self.hca.gid_table_len() {
            return Err(self.refuse("GID index beyond the port's GID table"));
        }
        Ok(self.hca.query_gid(index)?)
    }

    /// `ibv_query_gid_table`: the programmed entries of every port, in
    /// index order, into `out`; returns how many were written. `EINVAL`
    /// when `out` is too short for them (Linux `rdma_query_gid_table`).
    pub fn query_gid_table(&mut self, out: &mut [GidTableEntry]) -> Result<usize, Errno> {
        let mut n = 0;
        for port_num in 1..=self.hca.caps().num_ports.max(1) {
            for index in 0..self.hca.gid_table_len() {
                if !self.hca.gid_programmed(index) {
                    continue;
                }
                let Some(e) = self.hca.query_gid(index)? else {
                    continue;
                };
                let Some(slot) = out.get_mut(n) else {
                    return Err(self.refuse("the output is shorter than the GID table's entries"));
                };
                *slot = GidTableEntry {
                    gid: e.gid,
                    gid_index: index,
                    port_num,
                    gid_type: e.gid_type,
                };
                n += 1;
            }
        }
        Ok(n)
    }

    /// `ibv_query_pkey`: entry `index` of port `port_num`'s P_Key table.
    pub fn query_pkey(&mut self, port_num: u8, index: u16) -> Result<u16, Errno> {
        self.check_port_num(port_num)?;
        Ok(self.hca.query_pkey(port_num, index)?)
    }

    /// Add a GID entry at `index` of port `port_num` (an mlx5 extension:
    /// the kernel fills the table from netdev addresses; here the caller
    /// does, [`crate::Hca::add_gid`]). `EINVAL` for an index outside the
    /// table or one of the default entries, a zero GID or a VLAN above
    /// 4095 (reason in [`Verbs::last_error`]); `EOPNOTSUPP` on InfiniBand
    /// or for a RoCE version the device lacks. Deleted at [`Verbs::close`].
    pub fn add_gid(&mut self, port_num: u8, index: u16, entry: &GidEntry) -> Result<(), Errno> {
        self.check_port_num(port_num)?;
        self.hca
            .add_gid(index, entry)
            .map_err(|e| self.refuse_error(e))
    }

    /// Delete the entry [`Verbs::add_gid`] programmed at `index`.
    pub fn del_gid(&mut self, port_num: u8, index: u16) -> Result<(), Errno> {
        self.check_port_num(port_num)?;
        self.hca.del_gid(index).map_err(|e| self.refuse_error(e))
    }

    /// An `Hca` error as errno, its reason kept when it is an argument
    /// refusal.
    fn refuse_error(&mut self, e: crate::Error) -> Errno {
        match e {
            crate::Error::InvalidArgument(why) => self.refuse(why),
            e => e.into(),
        }
    }
}
