//! `mlx5 caps`: the device's capabilities, decoded and grouped, with the
//! `ibv_devinfo` view.

pub mod devinfo;
pub mod table;
