/*
 * mlx5-model: the mlx5-rs device model (a ConnectX firmware model written in
 * Rust) as a PCI Express function, for QEMU 7.2.
 *
 * The model is a shared library (crate mlx5-sim-ffi, libmlx5_sim_ffi.so) loaded
 * with dlopen; this file only builds the PCI function around it and forwards:
 *   - BAR0 (64-bit prefetchable, the model's size: 32 MiB) to the model's
 *     MMIO, except the MSI-X table at BAR0 + 0x2000 and the PBA at
 *     BAR0 + 0x3000, where ConnectX cards put them;
 *   - DMA through pci_dma_read/pci_dma_write (so through the vIOMMU);
 *   - the model's interrupts to msix_notify;
 *   - QEMU's virtual clock, with a timer at the model's next deadline;
 *   - system reset and FLR (PCIe capability with FLR) to the model's reset.
 *
 * Properties: profile ("cx5", "cx5,ib", "cx7,eth"...), lib (path of the
 * library; default $MLX5_MODEL_LIB), trace (file for the model's trace).
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/module.h"
#include "qemu/timer.h"
#include "qemu/error-report.h"
#include "qapi/error.h"
#include "hw/pci/pci.h"
#include "hw/pci/pcie.h"
#include "hw/pci/msix.h"
#include "hw/qdev-properties.h"
#include "migration/vmstate.h"
#include "sysemu/dma.h"
#include <dlfcn.h>

#include "mlx5_model.h"

#define TYPE_MLX5_MODEL "mlx5-model"
OBJECT_DECLARE_SIMPLE_TYPE(Mlx5ModelState, MLX5_MODEL)

#define MLX5_MSIX_TABLE_OFFSET 0x2000
#define MLX5_MSIX_PBA_OFFSET 0x3000
#define MLX5_PCIE_CAP_OFFSET 0x60

struct Mlx5ModelOps {
    uint32_t (*abi_version)(void);
    struct mlx5_model *(*create)(const char *, const char *, const struct mlx5_model_host *,
                                 struct mlx5_model_info *);
    uint64_t (*mmio_read)(struct mlx5_model *, uint64_t, uint64_t, uint32_t);
    void (*mmio_write)(struct mlx5_model *, uint64_t, uint64_t, uint32_t, uint64_t);
    void (*tick)(struct mlx5_model *, uint64_t);
    int64_t (*next_deadline)(struct mlx5_model *);
    void (*reset)(struct mlx5_model *);
    int (*failed)(struct mlx5_model *);
    void (*destroy)(struct mlx5_model *);
};

struct Mlx5ModelState {
    PCIDevice parent_obj;

    MemoryRegion bar0;
    MemoryRegion mmio;
    QEMUTimer *timer;

    void *lib_handle;
    struct Mlx5ModelOps ops;
    struct mlx5_model_host host;
    struct mlx5_model_info info;
    struct mlx5_model *model;
    bool reported_failure;

    char *profile;
    char *lib;
    char *trace;
};

static uint64_t mlx5_now(void)
{
    return qemu_clock_get_ns(QEMU_CLOCK_VIRTUAL);
}

static void mlx5_after_access(Mlx5ModelState *s)
{
    int64_t deadline = s->ops.next_deadline(s->model);

    if (deadline >= 0) {
        timer_mod(s->timer, deadline);
    } else {
        timer_del(s->timer);
    }
    if (!s->reported_failure && s->ops.failed(s->model)) {
        s->reported_failure = true;
        error_report("mlx5-model: the model failed (panic caught); see its trace");
    }
}

static uint64_t mlx5_mmio_read(void *opaque, hwaddr addr, unsigned size)
{
    Mlx5ModelState *s = opaque;
    uint64_t v = s->ops.mmio_read(s->model, mlx5_now(), addr, size);

    mlx5_after_access(s);
    return v;
}

static void mlx5_mmio_write(void *opaque, hwaddr addr, uint64_t val, unsigned size)
{
    Mlx5ModelState *s = opaque;

    s->ops.mmio_write(s->model, mlx5_now(), addr, size, val);
    mlx5_after_access(s);
}

/* The model's registers are big-endian (PRM: the init segment and the UAR
 * doorbells); every width reaches the model, which records what it does not
 * decode. */
static const MemoryRegionOps mlx5_mmio_ops = {
    .read = mlx5_mmio_read,
    .write = mlx5_mmio_write,
    .endianness = DEVICE_BIG_ENDIAN,
    .valid = { .min_access_size = 1, .max_access_size = 8 },
    .impl = { .min_access_size = 1, .max_access_size = 8 },
};

static void mlx5_timer_cb(void *opaque)
{
    Mlx5ModelState *s = opaque;

    s->ops.tick(s->model, mlx5_now());
    mlx5_after_access(s);
}

static int mlx5_host_dma_read(void *opaque, uint64_t addr, void *buf, uint64_t len)
{
    return pci_dma_read(PCI_DEVICE(opaque), addr, buf, len) == MEMTX_OK ? 0 : 1;
}

static int mlx5_host_dma_write(void *opaque, uint64_t addr, const void *buf, uint64_t len)
{
    return pci_dma_write(PCI_DEVICE(opaque), addr, buf, len) == MEMTX_OK ? 0 : 1;
}

static int mlx5_host_dma_mapped(void *opaque, uint64_t addr, uint64_t len)
{
    PCIDevice *pdev = PCI_DEVICE(opaque);

    return dma_memory_valid(pci_get_address_space(pdev), addr, len, DMA_DIRECTION_TO_DEVICE,
                            MEMTXATTRS_UNSPECIFIED) ? 1 : 0;
}

static void mlx5_host_irq(void *opaque, uint32_t vector)
{
    PCIDevice *pdev = PCI_DEVICE(opaque);

    if (msix_enabled(pdev)) {
        msix_notify(pdev, vector);
    }
}

static bool mlx5_load(Mlx5ModelState *s, Error **errp)
{
    const char *path = s->lib ? s->lib : getenv("MLX5_MODEL_LIB");

    if (!path) {
        error_setg(errp, "mlx5-model: set lib= or MLX5_MODEL_LIB to libmlx5_sim_ffi.so");
        return false;
    }
    s->lib_handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!s->lib_handle) {
        error_setg(errp, "mlx5-model: dlopen %s: %s", path, dlerror());
        return false;
    }
#define MLX5_SYM(field, name)                                                    \
    do {                                                                         \
        *(void **)&s->ops.field = dlsym(s->lib_handle, name);                    \
        if (!s->ops.field) {                                                     \
            error_setg(errp, "mlx5-model: %s lacks %s", path, name);             \
            return false;                                                        \
        }                                                                        \
    } while (0)
    MLX5_SYM(abi_version, "mlx5_model_abi_version");
    MLX5_SYM(create, "mlx5_model_create");
    MLX5_SYM(mmio_read, "mlx5_model_mmio_read");
    MLX5_SYM(mmio_write, "mlx5_model_mmio_write");
    MLX5_SYM(tick, "mlx5_model_tick");
    MLX5_SYM(next_deadline, "mlx5_model_next_deadline");
    MLX5_SYM(reset, "mlx5_model_reset");
    MLX5_SYM(failed, "mlx5_model_failed");
    MLX5_SYM(destroy, "mlx5_model_destroy");
#undef MLX5_SYM
    if (s->ops.abi_version() != MLX5_MODEL_ABI_VERSION) {
        error_setg(errp, "mlx5-model: %s has ABI %u, this QEMU was built for %u", path,
                   s->ops.abi_version(), MLX5_MODEL_ABI_VERSION);
        return false;
    }
    return true;
}

static void mlx5_unload(Mlx5ModelState *s)
{
    if (s->model) {
        s->ops.destroy(s->model);
        s->model = NULL;
    }
    if (s->lib_handle) {
        dlclose(s->lib_handle);
        s->lib_handle = NULL;
    }
}

static void mlx5_realize(PCIDevice *pdev, Error **errp)
{
    Mlx5ModelState *s = MLX5_MODEL(pdev);
    uint8_t *conf = pdev->config;
    int i;

    if (!mlx5_load(s, errp)) {
        mlx5_unload(s);
        return;
    }
    s->host.abi_version = MLX5_MODEL_ABI_VERSION;
    s->host.opaque = pdev;
    s->host.dma_read = mlx5_host_dma_read;
    s->host.dma_write = mlx5_host_dma_write;
    s->host.dma_mapped = mlx5_host_dma_mapped;
    s->host.irq = mlx5_host_irq;
    s->model = s->ops.create(s->profile ? s->profile : "cx5", s->trace, &s->host, &s->info);
    if (!s->model) {
        error_setg(errp, "mlx5-model: the model refused profile '%s' (or the trace file)",
                   s->profile ? s->profile : "cx5");
        mlx5_unload(s);
        return;
    }

    pci_config_set_vendor_id(conf, s->info.pci_vendor_id);
    pci_config_set_device_id(conf, s->info.pci_device_id);
    pci_config_set_class(conf, s->info.pci_class);
    pci_set_word(conf + PCI_SUBSYSTEM_VENDOR_ID, s->info.pci_vendor_id);
    pci_set_word(conf + PCI_SUBSYSTEM_ID, s->info.pci_device_id);
    pci_config_set_interrupt_pin(conf, 1);

    memory_region_init(&s->bar0, OBJECT(s), "mlx5-bar0", s->info.bar0_size);
    memory_region_init_io(&s->mmio, OBJECT(s), &mlx5_mmio_ops, s, "mlx5-mmio",
                          s->info.bar0_size);
    /* Below the MSI-X table and PBA that msix_init() maps into the same BAR. */
    memory_region_add_subregion_overlap(&s->bar0, 0, &s->mmio, -1);
    pci_register_bar(pdev, 0,
                     PCI_BASE_ADDRESS_SPACE_MEMORY | PCI_BASE_ADDRESS_MEM_TYPE_64 |
                         PCI_BASE_ADDRESS_MEM_PREFETCH,
                     &s->bar0);

    if (pcie_endpoint_cap_init(pdev, MLX5_PCIE_CAP_OFFSET) < 0) {
        error_setg(errp, "mlx5-model: cannot add the PCI Express capability");
        mlx5_unload(s);
        return;
    }
    pcie_cap_flr_init(pdev);
    if (msix_init(pdev, s->info.msix_vectors, &s->bar0, 0, MLX5_MSIX_TABLE_OFFSET, &s->bar0, 0,
                  MLX5_MSIX_PBA_OFFSET, 0, errp) < 0) {
        mlx5_unload(s);
        return;
    }
    for (i = 0; i < s->info.msix_vectors; i++) {
        msix_vector_use(pdev, i);
    }
    s->timer = timer_new_ns(QEMU_CLOCK_VIRTUAL, mlx5_timer_cb, s);
}

static void mlx5_exit(PCIDevice *pdev)
{
    Mlx5ModelState *s = MLX5_MODEL(pdev);

    if (s->timer) {
        timer_free(s->timer);
        s->timer = NULL;
    }
    msix_uninit(pdev, &s->bar0, &s->bar0);
    mlx5_unload(s);
}

static void mlx5_write_config(PCIDevice *pdev, uint32_t addr, uint32_t val, int len)
{
    pci_default_write_config(pdev, addr, val, len);
    /* Initiate Function Level Reset: pci_device_reset() -> mlx5_reset(). */
    pcie_cap_flr_write_config(pdev, addr, val, len);
}

static void mlx5_reset(DeviceState *dev)
{
    Mlx5ModelState *s = MLX5_MODEL(dev);

    if (s->model) {
        s->ops.reset(s->model);
        mlx5_after_access(s);
    }
}

static Property mlx5_properties[] = {
    DEFINE_PROP_STRING("profile", Mlx5ModelState, profile),
    DEFINE_PROP_STRING("lib", Mlx5ModelState, lib),
    DEFINE_PROP_STRING("trace", Mlx5ModelState, trace),
    DEFINE_PROP_END_OF_LIST(),
};

static const VMStateDescription mlx5_vmstate = {
    .name = TYPE_MLX5_MODEL,
    .unmigratable = 1,
};

static void mlx5_class_init(ObjectClass *klass, void *data)
{
    DeviceClass *dc = DEVICE_CLASS(klass);
    PCIDeviceClass *k = PCI_DEVICE_CLASS(klass);

    k->realize = mlx5_realize;
    k->exit = mlx5_exit;
    k->config_write = mlx5_write_config;
    /* Overwritten from the model's profile in realize. */
    k->vendor_id = 0x15b3;
    k->device_id = 0x1017;
    k->class_id = PCI_CLASS_NETWORK_ETHERNET;
    dc->desc = "mlx5-rs device model (ConnectX, loads libmlx5_sim_ffi.so)";
    dc->reset = mlx5_reset;
    dc->vmsd = &mlx5_vmstate;
    device_class_set_props(dc, mlx5_properties);
    set_bit(DEVICE_CATEGORY_NETWORK, dc->categories);
}

static const TypeInfo mlx5_info = {
    .name = TYPE_MLX5_MODEL,
    .parent = TYPE_PCI_DEVICE,
    .instance_size = sizeof(Mlx5ModelState),
    .class_init = mlx5_class_init,
    .interfaces = (InterfaceInfo[]){
        { INTERFACE_PCIE_DEVICE },
        {},
    },
};

static void mlx5_register_types(void)
{
    type_register_static(&mlx5_info);
}

type_init(mlx5_register_types)
