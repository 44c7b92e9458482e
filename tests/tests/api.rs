//! Small promises of the public API: `Default` is the `EMPTY` constant
//! wherever a type has one (so arrays can be made either way).

use mlx5_driver::cq::Cqe;
use mlx5_driver::qp::SendSlot;
use mlx5_driver::verbs::WorkCompletion;

#[test]
fn defaults_are_the_empty_constants() {
    assert_eq!(Cqe::default(), Cqe::EMPTY);
    assert_eq!(SendSlot::default(), SendSlot::EMPTY);
    assert_eq!(WorkCompletion::default(), WorkCompletion::EMPTY);
    let cqes: [Cqe; 4] = Default::default();
    assert!(cqes.iter().all(|c| *c == Cqe::EMPTY));
}
