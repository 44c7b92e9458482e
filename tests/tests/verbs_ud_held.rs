//! An address handle destroyed, and its slot reused for another host,
//! while UD sends made with it are posted but not yet fetched by the card:
//! every datagram still goes where its WQE's own copy of the address
//! vector says.

use mlx5_driver::verbs::WcStatus;
use mlx5_tests::hosts::*;
use mlx5_tests::ud::*;

use crate::verbs_ud::{close_all, poll, wire_for};

/// The card fetches a WQE after its doorbell, and a UD WQE carries its own
/// copy of the address vector (rdma-core `set_datagram_seg` copies
/// `mlx5_ah.av` into the WQE): destroying the handle, even reusing its
/// slot for another destination, while the sends that used it have not
/// been fetched changes nothing for them. The model holds every send
/// queue (`Injector::hold_send_queues`) from the first post to after the
/// handle's slot names another host, so the WQEs are read only then.
#[test]
fn an_address_handle_destroyed_while_its_sends_are_queued_leaves_them_their_own_copy() {
    big_stack(|| {
        let t = Transport::RoceV2Ipv4;
        let wire = wire_for(t);
        let mut a = host(t, 1, &wire, 0);
        let mut b = host(t, 2, &wire, 0);
        let mut c = host(t, 3, &wire, 0);
        let ua = ud_qp(&mut a, QKEY, UD_SLOTS_AT);
        let ub = ud_qp(&mut b, QKEY, UD_SLOTS_AT);
        let uc = ud_qp(&mut c, QKEY, UD_SLOTS_AT);
        for i in 0..4 {
            post_slot(&mut b, &ub, i, 0);
            post_slot(&mut c, &uc, i, 0);
        }
        let ah = a.ctx.create_ah(&a.ah_to(&b.addr)).unwrap();
        let av_b = a.ctx.ah_address_vector(ah).unwrap();
        a.dev.inject().hold_send_queues();
        for i in 0..4u64 {
            ud_send(
                &mut a,
                &ua,
                (ah, ub.qpn, QKEY),
                &pattern(64, i as u8),
                None,
                i,
            );
        }
        // Nothing fetched yet: no frame, no completion anywhere.
        for _ in 0..5 {
            wire.pump();
            a.dev.advance_us(100);
            b.dev.advance_us(100);
        }
        let mut wc = [mlx5_driver::verbs::WorkCompletion::EMPTY; 4];
        assert_eq!(
            a.ctx.poll_cq(a.scq, &mut wc).unwrap(),
            0,
            "held: nothing sent"
        );
        assert_eq!(
            b.ctx.poll_cq(b.rcq, &mut wc).unwrap(),
            0,
            "held: nothing arrived"
        );
        // The handle goes; the next one made takes a free slot (here the
        // same: the table hands back the lowest) toward host c, and two
        // sends use it, still held.
        a.ctx.destroy_ah(ah).unwrap();
        let ah_c = a.ctx.create_ah(&a.ah_to(&c.addr)).unwrap();
        let av_c = a.ctx.ah_address_vector(ah_c).unwrap();
        assert_ne!(av_c, av_b);
        for i in 4..6u64 {
            ud_send(
                &mut a,
                &ua,
                (ah_c, uc.qpn, QKEY),
                &pattern(64, i as u8),
                None,
                i,
            );
        }
        assert_eq!(
            a.dev.inject().release_send_queues(),
            1,
            "one send queue was due"
        );
        // The first four reach b, in order; the last two reach c.
        for i in 0..6u64 {
            let s = poll(&mut a, true, Some(&b.dev)).expect("a send completion");
            assert_eq!((s.wr_id, s.status), (i, WcStatus::Success), "{s:?}");
        }
        for i in 0..4 {
            let wc = poll(&mut b, false, Some(&a.dev)).expect("delivered to the first address");
            assert_eq!(wc.wr_id, i);
            check_ud_wc(t, &wc, ub.qpn, ua.qpn, 64, None, 0);
            assert_eq!(
                read_bytes(&b, ub.slots_at + i as usize * SLOT + GRH, 64),
                pattern(64, i as u8)
            );
        }
        for i in 0..2 {
            let wc = poll(&mut c, false, Some(&a.dev)).expect("delivered to the second address");
            assert_eq!(wc.wr_id, i);
            check_ud_wc(t, &wc, uc.qpn, ua.qpn, 64, None, 0);
            assert_eq!(
                read_bytes(&c, uc.slots_at + i as usize * SLOT + GRH, 64),
                pattern(64, 4 + i as u8)
            );
        }
        assert!(
            poll(&mut b, false, Some(&a.dev)).is_none(),
            "b got only its four"
        );
        assert!(
            poll(&mut c, false, Some(&a.dev)).is_none(),
            "c got only its two"
        );
        a.ctx.destroy_ah(ah_c).unwrap();
        close_all(a, &[ua], "held a");
        close_all(b, &[ub], "held b");
        close_all(c, &[uc], "held c");
    });
}
