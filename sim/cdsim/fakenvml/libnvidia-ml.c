/*
 * A fake libnvidia-ml.so.1 for the simulated cluster (compute-domains tests only; never
 * shipped).
 *
 * It exports the NVML calls that fabric discovery makes through pynvml, with NVML's C
 * signatures, struct layouts and return codes, and answers them from a topology file that
 * lies beside the library itself: <directory of this library>/FAKE_NVML_TOPOLOGY_FILE. The
 * library finds its own directory with dladdr(), so a program loads it exactly as it loads
 * the driver's library, with no variable or flag. The file is read again at every init, so a
 * test changes a node's fabric by replacing the file and the next check sees it.
 *
 * The file (written by cdsim.fakenvml; format in docs/simulation.md) is line-oriented text:
 * `key value` lines, `#` comments, a `format` line first, then the node's answers and one
 * block per GPU that starts with `gpu <index>`. A missing or unparseable file makes init
 * fail with NVML_ERROR_UNKNOWN (and says why on stderr).
 *
 * Built by cdsim.fakenvml, which passes FAKE_NVML_FORMAT and FAKE_NVML_TOPOLOGY_FILE with -D
 * (one definition, in Python), with:
 *   gcc -Wall -Wextra -Werror -O2 -fPIC -shared -Wl,-soname,libnvidia-ml.so.1
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef FAKE_NVML_FORMAT
#error "FAKE_NVML_FORMAT (the topology file's format line) must be defined"
#endif
#ifndef FAKE_NVML_TOPOLOGY_FILE
#error "FAKE_NVML_TOPOLOGY_FILE (the topology file's name beside the library) must be defined"
#endif

/* -- NVML's types, as nvml.h declares them ------------------------------------------------ */

typedef int nvmlReturn_t; /* nvml.h: enum nvmlReturn_enum */

#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_ARGUMENT_VERSION_MISMATCH 25
#define NVML_ERROR_UNKNOWN 999

#define NVML_GPU_FABRIC_UUID_LEN 16

/* nvml.h declares the state an unsigned char; pynvml (c_nvmlGpuFabricInfo_t) reads it as a
 * c_uint. Both layouts are the same size, the char's padding included: the fake writes the
 * whole word so that either reader sees the state. */
typedef unsigned int nvmlGpuFabricState_t;

typedef struct {
    unsigned char clusterUuid[NVML_GPU_FABRIC_UUID_LEN];
    nvmlReturn_t status;
    unsigned int cliqueId;
    nvmlGpuFabricState_t state;
} nvmlGpuFabricInfo_t;

typedef struct {
    unsigned int version;
    unsigned char clusterUuid[NVML_GPU_FABRIC_UUID_LEN];
    nvmlReturn_t status;
    unsigned int cliqueId;
    nvmlGpuFabricState_t state;
    unsigned int healthMask;
} nvmlGpuFabricInfo_v2_t;

typedef nvmlGpuFabricInfo_v2_t nvmlGpuFabricInfoV_t;

#define NVML_STRUCT_VERSION(data, ver) \
    (unsigned int)(sizeof(nvml##data##_v##ver##_t) | ((unsigned int)(ver) << 24U))
#define nvmlGpuFabricInfo_v2 NVML_STRUCT_VERSION(GpuFabricInfo, 2)

_Static_assert(sizeof(nvmlGpuFabricInfo_t) == 28, "nvmlGpuFabricInfo_t is 28 bytes");
_Static_assert(sizeof(nvmlGpuFabricInfo_v2_t) == 36, "nvmlGpuFabricInfo_v2_t is 36 bytes");
_Static_assert(nvmlGpuFabricInfo_v2 == 0x02000024, "nvmlGpuFabricInfo_v2 is 0x02000024");
_Static_assert(offsetof(nvmlGpuFabricInfo_v2_t, healthMask) == 32, "healthMask at 32");

/* Buffer sizes nvml.h gives callers (NVML_*_BUFFER_SIZE): answers never exceed them. */
#define DRIVER_VERSION_SIZE 80
#define UUID_SIZE 96
#define NAME_SIZE 96
#define PCI_BUS_ID_SIZE 32
#define MAX_GPUS 64

struct nvmlDevice_st {
    char uuid[UUID_SIZE];
    char name[NAME_SIZE];
    char pci_bus_id[PCI_BUS_ID_SIZE];
    nvmlReturn_t fabric_info; /* what both fabric calls answer for this GPU */
    nvmlGpuFabricState_t state;
    nvmlReturn_t status;
    unsigned char cluster_uuid[NVML_GPU_FABRIC_UUID_LEN];
    unsigned int clique_id;
    unsigned int health_mask;
};

typedef struct nvmlDevice_st *nvmlDevice_t;

struct topology {
    char driver_version[DRIVER_VERSION_SIZE];
    nvmlReturn_t init;          /* what init answers */
    nvmlReturn_t fabric_info_v; /* what the versioned fabric call answers instead of its data */
    unsigned int gpu_count;
    struct nvmlDevice_st gpus[MAX_GPUS];
};

/* -- return codes ------------------------------------------------------------------------- */

struct return_code {
    nvmlReturn_t code;
    const char *name;   /* without the NVML_ prefix, as the topology file writes it */
    const char *string; /* what nvmlErrorString answers */
};

static const struct return_code RETURNS[] = {
    {0, "SUCCESS", "Success"},
    {1, "ERROR_UNINITIALIZED", "Uninitialized"},
    {2, "ERROR_INVALID_ARGUMENT", "Invalid Argument"},
    {3, "ERROR_NOT_SUPPORTED", "Not Supported"},
    {4, "ERROR_NO_PERMISSION", "Insufficient Permissions"},
    {5, "ERROR_ALREADY_INITIALIZED", "Already Initialized"},
    {6, "ERROR_NOT_FOUND", "Not Found"},
    {7, "ERROR_INSUFFICIENT_SIZE", "Insufficient Size"},
    {8, "ERROR_INSUFFICIENT_POWER", "Insufficient External Power"},
    {9, "ERROR_DRIVER_NOT_LOADED", "Driver Not Loaded"},
    {10, "ERROR_TIMEOUT", "Timeout"},
    {11, "ERROR_IRQ_ISSUE", "Interrupt Request Issue"},
    {12, "ERROR_LIBRARY_NOT_FOUND", "NVML Shared Library Not Found"},
    {13, "ERROR_FUNCTION_NOT_FOUND", "Function Not Found"},
    {14, "ERROR_CORRUPTED_INFOROM", "Corrupted infoROM"},
    {15, "ERROR_GPU_IS_LOST", "GPU is lost"},
    {16, "ERROR_RESET_REQUIRED", "GPU requires restart"},
    {17, "ERROR_OPERATING_SYSTEM", "The operating system has blocked the request."},
    {18, "ERROR_LIB_RM_VERSION_MISMATCH", "RM has detected an NVML/RM version mismatch."},
    {19, "ERROR_IN_USE", "In use by another client"},
    {20, "ERROR_MEMORY", "Insufficient Memory"},
    {21, "ERROR_NO_DATA", "No data"},
    {22, "ERROR_VGPU_ECC_NOT_SUPPORTED", "ECC is not supported with vGPU"},
    {23, "ERROR_INSUFFICIENT_RESOURCES", "Insufficient resources"},
    {24, "ERROR_FREQ_NOT_SUPPORTED", "Frequency not supported"},
    {25, "ERROR_ARGUMENT_VERSION_MISMATCH", "Argument version mismatch"},
    {26, "ERROR_DEPRECATED", "Deprecated"},
    {27, "ERROR_NOT_READY", "Not ready"},
    {28, "ERROR_GPU_NOT_FOUND", "GPU not found"},
    {29, "ERROR_INVALID_STATE", "Invalid state"},
    {30, "ERROR_RESET_TYPE_NOT_SUPPORTED", "Reset type not supported"},
    {999, "ERROR_UNKNOWN", "Unknown Error"},
};

static const char *const STATES[] = {"NOT_SUPPORTED", "NOT_STARTED", "IN_PROGRESS", "COMPLETED"};

/* -- state -------------------------------------------------------------------------------- */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct topology loaded;  /* what the last successful init read */
static struct topology staging; /* what an init is reading (kept apart until it succeeds) */
static unsigned int init_count; /* inits not yet shut down, as NVML counts them */

/* -- the topology file -------------------------------------------------------------------- */

struct parser {
    const char *path;
    unsigned int line;
    struct topology *out;
    struct nvmlDevice_st *gpu; /* the block being read; NULL in the header */
};

static int fail(const struct parser *p, const char *what, const char *value) {
    fprintf(stderr, "fake libnvidia-ml.so.1: %s:%u: %s%s%s\n", p->path, p->line, what,
            value ? ": " : "", value ? value : "");
    return -1;
}

static int parse_return(const char *value, nvmlReturn_t *out) {
    for (size_t i = 0; i < sizeof RETURNS / sizeof RETURNS[0]; i++) {
        if (strcmp(value, RETURNS[i].name) == 0) {
            *out = RETURNS[i].code;
            return 0;
        }
    }
    return -1;
}

static int parse_state(const char *value, nvmlGpuFabricState_t *out) {
    for (unsigned int i = 0; i < sizeof STATES / sizeof STATES[0]; i++) {
        if (strcmp(value, STATES[i]) == 0) {
            *out = i;
            return 0;
        }
    }
    return -1;
}

static int parse_uint(const char *value, unsigned int *out) {
    char *end;
    if (*value == '-' || *value == '\0')
        return -1;
    errno = 0;
    unsigned long parsed = strtoul(value, &end, 0); /* 0x... for masks */
    if (errno != 0 || *end != '\0' || parsed > UINT_MAX)
        return -1;
    *out = (unsigned int)parsed;
    return 0;
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* 8-4-4-4-12 hex digits into 16 bytes, in the order they are written (RFC 4122). */
static int parse_uuid(const char *value, unsigned char out[NVML_GPU_FABRIC_UUID_LEN]) {
    if (strlen(value) != 36)
        return -1;
    size_t byte = 0;
    for (size_t i = 0; i < 36; i += 2) {
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (value[i] != '-')
                return -1;
            i++;
        }
        int high = hex_digit(value[i]), low = hex_digit(value[i + 1]);
        if (high < 0 || low < 0)
            return -1;
        out[byte++] = (unsigned char)(high << 4 | low);
    }
    return byte == NVML_GPU_FABRIC_UUID_LEN ? 0 : -1;
}

static int copy_text(const struct parser *p, const char *value, char *out, size_t size) {
    if (strlen(value) >= size)
        return fail(p, "value too long", value);
    memcpy(out, value, strlen(value) + 1);
    return 0;
}

static int header_line(struct parser *p, const char *key, const char *value) {
    struct topology *t = p->out;
    if (strcmp(key, "node") == 0)
        return 0; /* for people reading the file */
    if (strcmp(key, "driver-version") == 0)
        return copy_text(p, value, t->driver_version, sizeof t->driver_version);
    if (strcmp(key, "init") == 0)
        return parse_return(value, &t->init) ? fail(p, "unknown return code", value) : 0;
    if (strcmp(key, "fabric-info-v") == 0)
        return parse_return(value, &t->fabric_info_v) ? fail(p, "unknown return code", value) : 0;
    return fail(p, "unknown key before the first gpu", key);
}

static int gpu_line(struct parser *p, const char *key, const char *value) {
    struct nvmlDevice_st *g = p->gpu;
    if (strcmp(key, "uuid") == 0)
        return copy_text(p, value, g->uuid, sizeof g->uuid);
    if (strcmp(key, "name") == 0)
        return copy_text(p, value, g->name, sizeof g->name);
    if (strcmp(key, "pci-bus-id") == 0)
        return copy_text(p, value, g->pci_bus_id, sizeof g->pci_bus_id);
    if (strcmp(key, "fabric-info") == 0)
        return parse_return(value, &g->fabric_info) ? fail(p, "unknown return code", value) : 0;
    if (strcmp(key, "state") == 0)
        return parse_state(value, &g->state) ? fail(p, "unknown fabric state", value) : 0;
    if (strcmp(key, "status") == 0)
        return parse_return(value, &g->status) ? fail(p, "unknown return code", value) : 0;
    if (strcmp(key, "cluster-uuid") == 0)
        return parse_uuid(value, g->cluster_uuid) ? fail(p, "not a UUID", value) : 0;
    if (strcmp(key, "clique-id") == 0)
        return parse_uint(value, &g->clique_id) ? fail(p, "not an unsigned integer", value) : 0;
    if (strcmp(key, "health-mask") == 0)
        return parse_uint(value, &g->health_mask) ? fail(p, "not an unsigned integer", value) : 0;
    return fail(p, "unknown key in a gpu block", key);
}

static int start_gpu(struct parser *p, const char *value) {
    unsigned int index;
    struct topology *t = p->out;
    if (parse_uint(value, &index) || index != t->gpu_count)
        return fail(p, "gpu blocks must be numbered 0, 1, ... in order", value);
    if (t->gpu_count == MAX_GPUS)
        return fail(p, "too many gpus", value);
    p->gpu = &t->gpus[t->gpu_count++];
    memset(p->gpu, 0, sizeof *p->gpu);
    return 0;
}

/* One line, without its newline: blank, a comment, or `key value`. */
static int parse_line(struct parser *p, char *line, int *seen_format) {
    size_t len = strlen(line);
    while (len > 0 && (line[len - 1] == ' ' || line[len - 1] == '\t' || line[len - 1] == '\r'))
        line[--len] = '\0';
    char *key = line + strspn(line, " \t");
    if (*key == '\0' || *key == '#')
        return 0;
    char *value = key + strcspn(key, " \t");
    if (*value != '\0') {
        *value++ = '\0';
        value += strspn(value, " \t");
    }
    if (!*seen_format) {
        if (strcmp(key, "format") != 0 || strcmp(value, FAKE_NVML_FORMAT) != 0)
            return fail(p, "the first line must be: format " FAKE_NVML_FORMAT, NULL);
        *seen_format = 1;
        return 0;
    }
    if (*value == '\0')
        return fail(p, "a key without a value", key);
    if (strcmp(key, "gpu") == 0)
        return start_gpu(p, value);
    return p->gpu ? gpu_line(p, key, value) : header_line(p, key, value);
}

static int parse_file(struct parser *p, FILE *file) {
    char *line = NULL;
    size_t capacity = 0;
    ssize_t got;
    int seen_format = 0, result = 0;
    while (result == 0 && (got = getline(&line, &capacity, file)) != -1) {
        p->line++;
        if ((size_t)got != strlen(line))
            result = fail(p, "a NUL byte in the line", NULL);
        else if (got > 0 && line[got - 1] == '\n')
            line[got - 1] = '\0';
        if (result == 0)
            result = parse_line(p, line, &seen_format);
    }
    free(line);
    if (result)
        return result;
    if (ferror(file))
        return fail(p, "read error", strerror(errno));
    if (!seen_format)
        return fail(p, "empty file: the first line must be: format " FAKE_NVML_FORMAT, NULL);
    if (p->out->driver_version[0] == '\0')
        return fail(p, "no driver-version", NULL);
    for (unsigned int i = 0; i < p->out->gpu_count; i++) {
        if (p->out->gpus[i].uuid[0] == '\0' || p->out->gpus[i].name[0] == '\0')
            return fail(p, "every gpu needs a uuid and a name", NULL);
    }
    return 0;
}

/* The file beside this library: its directory is where dladdr says the library was loaded. */
static int topology_path(char *out, size_t size) {
    Dl_info info;
    if (!dladdr((void *)&topology_path, &info) || info.dli_fname == NULL)
        return -1;
    const char *slash = strrchr(info.dli_fname, '/');
    int n = slash == NULL
                ? snprintf(out, size, "%s", FAKE_NVML_TOPOLOGY_FILE)
                : snprintf(out, size, "%.*s/%s", (int)(slash - info.dli_fname), info.dli_fname,
                           FAKE_NVML_TOPOLOGY_FILE);
    return n < 0 || (size_t)n >= size ? -1 : 0;
}

static int read_topology(struct topology *out) {
    char path[PATH_MAX];
    memset(out, 0, sizeof *out);
    out->init = NVML_SUCCESS;
    out->fabric_info_v = NVML_SUCCESS;
    if (topology_path(path, sizeof path)) {
        fprintf(stderr, "fake libnvidia-ml.so.1: cannot tell where the library was loaded from\n");
        return -1;
    }
    struct parser p = {.path = path, .line = 0, .out = out, .gpu = NULL};
    FILE *file = fopen(path, "re");
    if (file == NULL)
        return fail(&p, "cannot open the topology file", strerror(errno));
    int result = parse_file(&p, file);
    fclose(file);
    return result;
}

/* -- NVML --------------------------------------------------------------------------------- */

static nvmlReturn_t init_locked(void) {
    if (read_topology(&staging))
        return NVML_ERROR_UNKNOWN;
    if (staging.init != NVML_SUCCESS)
        return staging.init;
    loaded = staging;
    init_count++;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    pthread_mutex_lock(&lock);
    nvmlReturn_t result = init_locked();
    pthread_mutex_unlock(&lock);
    return result;
}

nvmlReturn_t nvmlInit_v2(void) {
    return nvmlInitWithFlags(0);
}

nvmlReturn_t nvmlShutdown(void) {
    pthread_mutex_lock(&lock);
    nvmlReturn_t result = NVML_ERROR_UNINITIALIZED;
    if (init_count > 0) {
        init_count--;
        result = NVML_SUCCESS;
    }
    pthread_mutex_unlock(&lock);
    return result;
}

const char *nvmlErrorString(nvmlReturn_t result) {
    for (size_t i = 0; i < sizeof RETURNS / sizeof RETURNS[0]; i++) {
        if (RETURNS[i].code == result)
            return RETURNS[i].string;
    }
    return "Unknown Error";
}

static nvmlReturn_t copy_out(const char *value, char *buffer, unsigned int length) {
    if (buffer == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    size_t needed = strlen(value) + 1;
    if (needed > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buffer, value, needed);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    pthread_mutex_lock(&lock);
    nvmlReturn_t result = init_count == 0 ? NVML_ERROR_UNINITIALIZED
                                          : copy_out(loaded.driver_version, version, length);
    pthread_mutex_unlock(&lock);
    return result;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    pthread_mutex_lock(&lock);
    nvmlReturn_t result = NVML_SUCCESS;
    if (init_count == 0)
        result = NVML_ERROR_UNINITIALIZED;
    else if (count == NULL)
        result = NVML_ERROR_INVALID_ARGUMENT;
    else
        *count = loaded.gpu_count;
    pthread_mutex_unlock(&lock);
    return result;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    pthread_mutex_lock(&lock);
    nvmlReturn_t result = NVML_SUCCESS;
    if (init_count == 0)
        result = NVML_ERROR_UNINITIALIZED;
    else if (device == NULL || index >= loaded.gpu_count)
        result = NVML_ERROR_INVALID_ARGUMENT;
    else
        *device = &loaded.gpus[index];
    pthread_mutex_unlock(&lock);
    return result;
}

/* The GPU a handle names, or NULL (call with the lock held). */
static const struct nvmlDevice_st *gpu_of(nvmlDevice_t device) {
    uintptr_t first = (uintptr_t)&loaded.gpus[0], at = (uintptr_t)device;
    if (init_count == 0 || at < first)
        return NULL;
    size_t offset = at - first;
    if (offset % sizeof loaded.gpus[0] != 0 || offset / sizeof loaded.gpus[0] >= loaded.gpu_count)
        return NULL;
    return &loaded.gpus[offset / sizeof loaded.gpus[0]];
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    pthread_mutex_lock(&lock);
    const struct nvmlDevice_st *gpu = gpu_of(device);
    nvmlReturn_t result = init_count == 0 ? NVML_ERROR_UNINITIALIZED
                          : gpu == NULL   ? NVML_ERROR_INVALID_ARGUMENT
                                          : copy_out(gpu->uuid, uuid, length);
    pthread_mutex_unlock(&lock);
    return result;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    pthread_mutex_lock(&lock);
    const struct nvmlDevice_st *gpu = gpu_of(device);
    nvmlReturn_t result = init_count == 0 ? NVML_ERROR_UNINITIALIZED
                          : gpu == NULL   ? NVML_ERROR_INVALID_ARGUMENT
                                          : copy_out(gpu->name, name, length);
    pthread_mutex_unlock(&lock);
    return result;
}

/* The GPU behind a fabric call, or the call's error (call with the lock held). */
static nvmlReturn_t fabric_gpu(nvmlDevice_t device, const void *info,
                               const struct nvmlDevice_st **gpu) {
    if (init_count == 0)
        return NVML_ERROR_UNINITIALIZED;
    *gpu = gpu_of(device);
    if (*gpu == NULL || info == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}

/* Deprecated in NVML (no health mask), still answered: drivers before the V call have only it. */
nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device, nvmlGpuFabricInfo_t *info) {
    pthread_mutex_lock(&lock);
    const struct nvmlDevice_st *gpu = NULL;
    nvmlReturn_t result = fabric_gpu(device, info, &gpu);
    if (result == NVML_SUCCESS)
        result = gpu->fabric_info;
    if (result == NVML_SUCCESS) {
        memcpy(info->clusterUuid, gpu->cluster_uuid, sizeof info->clusterUuid);
        info->status = gpu->status;
        info->cliqueId = gpu->clique_id;
        info->state = gpu->state;
    }
    pthread_mutex_unlock(&lock);
    return result;
}

nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, nvmlGpuFabricInfoV_t *info) {
    pthread_mutex_lock(&lock);
    const struct nvmlDevice_st *gpu = NULL;
    nvmlReturn_t result = fabric_gpu(device, info, &gpu);
    if (result == NVML_SUCCESS)
        result = loaded.fabric_info_v; /* an older driver's answer, when the file says so */
    if (result == NVML_SUCCESS && info->version != nvmlGpuFabricInfo_v2)
        result = NVML_ERROR_ARGUMENT_VERSION_MISMATCH; /* a struct version it does not know */
    if (result == NVML_SUCCESS)
        result = gpu->fabric_info;
    if (result == NVML_SUCCESS) {
        memcpy(info->clusterUuid, gpu->cluster_uuid, sizeof info->clusterUuid);
        info->status = gpu->status;
        info->cliqueId = gpu->clique_id;
        info->state = gpu->state;
        info->healthMask = gpu->health_mask;
    }
    pthread_mutex_unlock(&lock);
    return result;
}
