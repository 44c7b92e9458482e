/* The C ABI of the mlx5 device model (crate mlx5-sim-ffi, libmlx5_sim_ffi.so).
 * SPDX-License-Identifier: MIT OR Apache-2.0
 *
 * A VMM hosts the model as a PCI function: it forwards BAR0 accesses, copies
 * DMA through its own callbacks, delivers the interrupts the model raises and
 * passes its virtual clock. Every entry point catches a Rust panic (it never
 * unwinds into the caller); after one, the model is dead: reads return all
 * ones, writes are ignored, and mlx5_model_failed() returns 1.
 * All calls for one model must be serialised by the caller (QEMU: the BQL). */
#ifndef MLX5_MODEL_H
#define MLX5_MODEL_H
#include <stdint.h>

#define MLX5_MODEL_ABI_VERSION 1u

struct mlx5_model;

struct mlx5_model_host {
    /* MLX5_MODEL_ABI_VERSION the caller was built against. */
    uint32_t abi_version;
    void *opaque;
    /* Copy len bytes from / to bus address addr; return 0 on success,
     * non-zero when the access fails (it becomes the model's IOMMU fault). */
    int (*dma_read)(void *opaque, uint64_t addr, void *buf, uint64_t len);
    int (*dma_write)(void *opaque, uint64_t addr, const void *buf, uint64_t len);
    /* 1 if [addr, addr + len) is reachable by the device, else 0. */
    int (*dma_mapped)(void *opaque, uint64_t addr, uint64_t len);
    /* Send MSI-X vector `vector`. Must not call back into the model. */
    void (*irq)(void *opaque, uint32_t vector);
};

struct mlx5_model_info {
    uint16_t pci_vendor_id;
    uint16_t pci_device_id;
    /* 0x0207 InfiniBand, 0x0200 Ethernet. */
    uint16_t pci_class;
    uint16_t msix_vectors;
    uint64_t bar0_size;
};

/* MLX5_MODEL_ABI_VERSION of the library. */
uint32_t mlx5_model_abi_version(void);
/* profile: "cx4lx", "cx5", "cx6dx" or "cx7", optionally followed by ",ib"
 * (InfiniBand port) or ",eth". trace_path: NULL, or a file the model
 * appends every command and its state counters to. NULL on failure. */
struct mlx5_model *mlx5_model_create(const char *profile, const char *trace_path,
                                     const struct mlx5_model_host *host,
                                     struct mlx5_model_info *info);
/* size is 4 or 8; the value is the register's (big-endian device). */
uint64_t mlx5_model_mmio_read(struct mlx5_model *m, uint64_t now_ns, uint64_t offset, uint32_t size);
void mlx5_model_mmio_write(struct mlx5_model *m, uint64_t now_ns, uint64_t offset, uint32_t size,
                           uint64_t value);
/* Advance to now_ns and run what fell due. */
void mlx5_model_tick(struct mlx5_model *m, uint64_t now_ns);
/* Host clock time of the next timed work, or -1 if none. */
int64_t mlx5_model_next_deadline(struct mlx5_model *m);
/* System reset or function-level reset. */
void mlx5_model_reset(struct mlx5_model *m);
/* 1 after a caught panic. */
int mlx5_model_failed(struct mlx5_model *m);
void mlx5_model_destroy(struct mlx5_model *m);

#endif
