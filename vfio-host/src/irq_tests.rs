//! The latching wait of [`Vectors`] on plain eventfds, signalled by the
//! tests the way the kernel signals them on an interrupt (a write of 1).
//! The device side (GET_IRQ_INFO, SET_IRQS) is proven in the QEMU guest
//! (`tests/vfio-qemu/run.sh`).

use super::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;

const MS: u64 = 1_000_000;

fn fire(v: &Vectors, i: usize) {
    v.fd(i).write(1).unwrap();
}

#[test]
fn fired_vectors_are_latched_reported_once_and_others_stay_latched() {
    let v = Vectors::new(3).unwrap();
    assert_eq!(v.len(), 3);
    fire(&v, 1);
    assert_eq!(v.wait(0b111, 1000 * MS), Ok(0b010));
    // Reported once: the counter was read.
    assert_eq!(v.wait(0b111, 0), Ok(0));
    fire(&v, 0);
    fire(&v, 2);
    // Only what was asked is returned; vector 2 stays latched.
    assert_eq!(v.wait(0b001, 0), Ok(0b001));
    assert_eq!(v.wait(0b011, 0), Ok(0));
    assert_eq!(v.wait(0b100, 0), Ok(0b100));
    // Both at once when both fired before the wait.
    fire(&v, 0);
    fire(&v, 2);
    assert_eq!(v.wait(0b111, 0), Ok(0b101));
}

#[test]
fn several_firings_before_a_wait_are_one_report() {
    let v = Vectors::new(1).unwrap();
    for _ in 0..3 {
        fire(&v, 0);
    }
    assert_eq!(v.wait(1, 0), Ok(1));
    assert_eq!(v.wait(1, 0), Ok(0));
}

#[test]
fn a_quiet_wait_returns_zero_after_its_timeout_and_not_long_after() {
    let v = Vectors::new(2).unwrap();
    let t = Instant::now();
    assert_eq!(v.wait(0b11, 50 * MS), Ok(0));
    let dt = t.elapsed();
    assert!(dt >= Duration::from_millis(50), "returned early: {dt:?}");
    // Generous: the machine running the tests may be loaded.
    assert!(dt < Duration::from_millis(1050), "overslept: {dt:?}");
    let t = Instant::now();
    assert_eq!(v.wait(0b11, 0), Ok(0));
    assert!(t.elapsed() < Duration::from_millis(500));
}

#[test]
fn masks_naming_no_vector_are_refused_and_extra_bits_ignored() {
    let v = Vectors::new(2).unwrap();
    assert_eq!(v.wait(0, 0), Err(HalError::InvalidRequest));
    assert_eq!(v.wait(0b100, 10 * MS), Err(HalError::InvalidRequest));
    fire(&v, 1);
    assert_eq!(v.wait(u64::MAX, 0), Ok(0b10));
    let none = Vectors::new(0).unwrap();
    assert_eq!(none.wait(u64::MAX, 0), Err(HalError::InvalidRequest));
}

#[test]
fn all_sixty_four_vectors_and_no_more() {
    let v = Vectors::new(100).unwrap();
    assert_eq!(v.len(), MAX_IRQ_VECTORS);
    fire(&v, 63);
    fire(&v, 0);
    assert_eq!(v.wait(1 << 63, 0), Ok(1 << 63));
    assert_eq!(v.wait(u64::MAX, 0), Ok(1));
}

#[test]
fn a_blocked_wait_wakes_when_its_vector_fires() {
    let v = Vectors::new(2).unwrap();
    let t = Instant::now();
    let got = thread::scope(|s| {
        s.spawn(|| {
            thread::sleep(Duration::from_millis(30));
            // A vector not waited for does not wake the waiter...
            fire(&v, 0);
            thread::sleep(Duration::from_millis(30));
            fire(&v, 1);
        });
        v.wait(0b10, 10_000 * MS)
    });
    let dt = t.elapsed();
    assert_eq!(got, Ok(0b10));
    assert!(dt >= Duration::from_millis(60), "woke early: {dt:?}");
    assert!(dt < Duration::from_secs(5), "did not wake: {dt:?}");
    // ...and stays latched.
    assert_eq!(v.wait(0b01, 0), Ok(0b01));
}

#[test]
fn two_waiters_one_firing_one_report() {
    let v = Vectors::new(1).unwrap();
    let results: Vec<Result<u64, HalError>> = thread::scope(|s| {
        let waiters: Vec<_> = (0..2).map(|_| s.spawn(|| v.wait(1, 400 * MS))).collect();
        thread::sleep(Duration::from_millis(50));
        fire(&v, 0);
        waiters.into_iter().map(|w| w.join().unwrap()).collect()
    });
    let mut got: Vec<u64> = results.into_iter().map(Result::unwrap).collect();
    got.sort_unstable();
    assert_eq!(got, vec![0, 1], "exactly one waiter gets the firing");
}

static SIGNALS: AtomicUsize = AtomicUsize::new(0);

extern "C" fn count_signal(_: libc::c_int) {
    SIGNALS.fetch_add(1, Ordering::SeqCst);
}

#[test]
fn signals_neither_end_the_wait_early_nor_lose_a_firing() {
    // SAFETY: installs a handler for SIGUSR1, which nothing else in this test
    // binary uses; the handler only touches an atomic (async-signal-safe).
    // No SA_RESTART: ppoll then fails with EINTR, the case under test.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = count_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        libc::sigemptyset(&mut sa.sa_mask);
        assert_eq!(libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut()), 0);
    }
    let v = Vectors::new(1).unwrap();
    let before = SIGNALS.load(Ordering::SeqCst);
    let v = &v;
    let (quiet, quiet_time, fired) = thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = s.spawn(move || {
            // SAFETY: pthread_self has no preconditions.
            tx.send(unsafe { libc::pthread_self() }).unwrap();
            let t = Instant::now();
            let quiet = v.wait(1, 300 * MS);
            let quiet_time = t.elapsed();
            let fired = v.wait(1, 10_000 * MS);
            (quiet, quiet_time, fired)
        });
        let tid = rx.recv().unwrap();
        for _ in 0..5 {
            thread::sleep(Duration::from_millis(40));
            // SAFETY: `tid` is the waiter, alive until joined below.
            assert_eq!(unsafe { libc::pthread_kill(tid, libc::SIGUSR1) }, 0);
        }
        thread::sleep(Duration::from_millis(200));
        // SAFETY: as above; the waiter is in its second wait now.
        assert_eq!(unsafe { libc::pthread_kill(tid, libc::SIGUSR1) }, 0);
        thread::sleep(Duration::from_millis(20));
        fire(v, 0);
        waiter.join().unwrap()
    });
    assert!(
        SIGNALS.load(Ordering::SeqCst) - before >= 6,
        "signals delivered"
    );
    assert_eq!(quiet, Ok(0));
    assert!(
        quiet_time >= Duration::from_millis(300),
        "EINTR ended the wait early: {quiet_time:?}"
    );
    assert_eq!(fired, Ok(1));
}

/// The descriptor an application's own event loop waits on: readable when
/// the vector fires; once the application reads it, the interrupt is
/// consumed and `wait` does not report it again; left unread, `wait`
/// reports it.
#[test]
fn the_raw_fd_is_what_an_own_event_loop_waits_on() {
    let v = Vectors::new(2).unwrap();
    assert!(v.raw_fd(2).is_none());
    let fd = v.raw_fd(1).unwrap();
    let readable = |timeout_ms: i32| {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one initialised pollfd in a live local; `fd` is open
        // (owned by `v`, alive for the whole test).
        let r = unsafe { libc::poll(&mut p, 1, timeout_ms) };
        assert!(r >= 0, "poll failed");
        r == 1 && p.revents & libc::POLLIN != 0
    };
    assert!(!readable(0), "nothing fired yet");
    fire(&v, 1);
    assert!(readable(1000), "the vector fired");
    // Left unread, the driver's wait reports it (and clears it).
    assert_eq!(v.wait(0b10, 0), Ok(0b10));
    assert!(!readable(0));
    // Read by the application, it is consumed there.
    fire(&v, 1);
    let mut buf = [0u8; 8];
    // SAFETY: `buf` is a live, exclusively borrowed 8-byte buffer; an
    // eventfd read writes exactly 8 bytes.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), 8) };
    assert_eq!(n, 8);
    assert_eq!(u64::from_ne_bytes(buf), 1, "one firing");
    assert_eq!(v.wait(0b10, 0), Ok(0));
}
