//! # mlx5-vfio
//!
//! The Linux VFIO platform (`mlx5_hal::Hal` over vfio-pci). Lands with issue #7;
//! today it is empty.
