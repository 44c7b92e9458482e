//! What the model records for the test harness and for diagnosis, as
//! opposed to what it tells the driver: IOMMU faults, protocol violations,
//! the command trace, and why send WQEs failed locally.

use crate::dma::IommuFault;
use crate::trace::TraceEntry;
use crate::Violation;

/// Observations of the model (`Device::faults`, `Device::violations`,
/// `Device::trace`, `Traffic::send_errors`).
#[derive(Debug, Default)]
pub(crate) struct Records {
    /// Device accesses outside the DMA memory the driver allocated.
    pub faults: Vec<IommuFault>,
    /// Driver behaviour real hardware would punish.
    pub violations: Vec<Violation>,
    /// Every command as the firmware saw it.
    pub trace: Vec<TraceEntry>,
    /// Why send WQEs failed locally (malformed, key errors).
    pub send_errors: Vec<String>,
}
