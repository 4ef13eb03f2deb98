/*
 * vecop: a custom backend written in C against Triton's backend API (backend_api.h), the
 * example to copy when porting a backend of your own to Tritium. Built as
 * `<backend-directory>/vecop/libtriton_vecop.so`, it serves models whose config says
 * `backend: "vecop"`, in two modes chosen by the model config:
 *
 * - batched (the default): FP32 inputs A and B of the same shape -> OUT = scale * (A + B) +
 *   offset. Each request of a dynamic batch is answered on its own; a request whose inputs
 *   do not match gets an error response and the others of the batch still succeed.
 * - decoupled (`model_transaction_policy { decoupled: true }`): FP32 input IN -> one response
 *   per element, OUT = [scale * element], then the final flag alone, sent through a response
 *   factory after the request is released; each response is reported to the server's response
 *   statistics (`response_stats`).
 *
 * `scale` is a model config parameter (`parameters { key: "scale" value { string_value: "2" } }`,
 * default 1), and so is `execute_delay_ms` (a pause in every Execute standing in for real work,
 * as in Triton's identity backend; default 0); `offset` is a request parameter (INT or DOUBLE,
 * default 0). Every element
 * handled counts in the custom metric `vecop_elements_total{model="<name>"}` on /metrics.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend_api.h"

#define LOG(level, msg) TRITONSERVER_LogMessage((level), __FILE__, __LINE__, (msg))

/* Returns (from the calling function) an error object that `expr` returned. */
#define RETURN_IF_ERROR(expr)          \
  do {                                 \
    TRITONSERVER_Error* err__ = (expr); \
    if (err__ != NULL) return err__;   \
  } while (0)

typedef struct {
  TRITONSERVER_MetricFamily* elements; /* vecop_elements_total, one metric per model */
} BackendState;

typedef struct {
  char name[256];
  float scale;
  useconds_t delay_us; /* execute_delay_ms: a pause per Execute, standing in for real work */
  bool decoupled;
  bool accumulate; /* config parameter accumulate: "1", a sequence model with implicit state */
  TRITONSERVER_Metric* elements;
} ModelState;

static TRITONSERVER_Error* error(TRITONSERVER_Error_Code code, const char* fmt, const char* arg) {
  char msg[512];
  snprintf(msg, sizeof msg, fmt, arg);
  return TRITONSERVER_ErrorNew(code, msg);
}

/*
 * The model config arrives as JSON. A real backend uses a JSON library; this example only needs
 * two values, so it finds a key's value in the compact JSON the server produces. Returns a
 * pointer just past `"key":` (and any blanks), or NULL.
 */
static const char* json_value(const char* json, const char* key) {
  char quoted[128];
  snprintf(quoted, sizeof quoted, "\"%s\"", key);
  for (const char* p = strstr(json, quoted); p != NULL; p = strstr(p + 1, quoted)) {
    const char* v = p + strlen(quoted);
    while (*v == ' ' || *v == '\n') v++;
    if (*v != ':') continue;
    v++;
    while (*v == ' ' || *v == '\n') v++;
    return v;
  }
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_Initialize(TRITONBACKEND_Backend* backend) {
  uint32_t major, minor;
  RETURN_IF_ERROR(TRITONBACKEND_ApiVersion(&major, &minor));
  if (major != BACKEND_API_VERSION_MAJOR || minor < BACKEND_API_VERSION_MINOR) {
    return TRITONSERVER_ErrorNew(
        TRITONSERVER_ERROR_UNSUPPORTED, "vecop: the server's backend API version does not support this backend");
  }
  BackendState* state = calloc(1, sizeof *state);
  if (state == NULL) return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, "vecop: out of memory");
  TRITONSERVER_Error* err = TRITONSERVER_MetricFamilyNew(
      &state->elements, TRITONSERVER_METRIC_KIND_COUNTER, "vecop_elements_total",
      "Tensor elements computed by the vecop example backend");
  if (err != NULL) {
    free(state);
    return err;
  }
  LOG(TRITONSERVER_LOG_INFO, "vecop: backend initialized");
  return TRITONBACKEND_BackendSetState(backend, state);
}

TRITONSERVER_Error* TRITONBACKEND_Finalize(TRITONBACKEND_Backend* backend) {
  void* vstate;
  RETURN_IF_ERROR(TRITONBACKEND_BackendState(backend, &vstate));
  BackendState* state = vstate;
  TRITONSERVER_MetricFamilyDelete(state->elements);
  free(state);
  LOG(TRITONSERVER_LOG_INFO, "vecop: backend finalized");
  return NULL;
}

/* The number in a model config parameter (`"parameters":{"<key>":{"string_value":"<n>"}}`),
 * `fallback` without one. */
static TRITONSERVER_Error* config_number(const char* json, const char* key, double fallback, double* out) {
  const char* entry = json_value(json, "parameters");
  entry = entry != NULL ? json_value(entry, key) : NULL;
  const char* text = entry != NULL ? json_value(entry, "string_value") : NULL;
  *out = fallback;
  if (text == NULL) return NULL;
  char* end;
  *out = strtod(text + 1, &end);
  if (*text != '"' || end == text + 1 || *end != '"') {
    return error(TRITONSERVER_ERROR_INVALID_ARG, "vecop: model config parameter '%s' is not a number", key);
  }
  return NULL;
}

/* Reads `scale`, `execute_delay_ms`, `accumulate` and the decoupled flag from the model config. */
static TRITONSERVER_Error* read_config(TRITONBACKEND_Model* model, ModelState* state) {
  TRITONSERVER_Message* message;
  RETURN_IF_ERROR(TRITONBACKEND_ModelConfig(model, 1, &message));
  const char* json;
  size_t size;
  double scale = 1, delay_ms = 0, accumulate = 0;
  TRITONSERVER_Error* err = TRITONSERVER_MessageSerializeToJson(message, &json, &size);
  if (err == NULL) {
    const char* decoupled = json_value(json, "decoupled");
    state->decoupled = decoupled != NULL && strncmp(decoupled, "true", 4) == 0;
    err = config_number(json, "scale", 1, &scale);
  }
  if (err == NULL) err = config_number(json, "execute_delay_ms", 0, &delay_ms);
  if (err == NULL) err = config_number(json, "accumulate", 0, &accumulate);
  state->accumulate = accumulate != 0;
  state->scale = (float)scale;
  state->delay_us = delay_ms > 0 ? (useconds_t)(delay_ms * 1000) : 0;
  TRITONSERVER_MessageDelete(message);
  return err;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model* model) {
  const char* name;
  RETURN_IF_ERROR(TRITONBACKEND_ModelName(model, &name));
  ModelState* state = calloc(1, sizeof *state);
  if (state == NULL) return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, "vecop: out of memory");
  snprintf(state->name, sizeof state->name, "%s", name);
  TRITONSERVER_Error* err = read_config(model, state);
  if (err == NULL) {
    TRITONBACKEND_Backend* backend;
    void* backend_state;
    err = TRITONBACKEND_ModelBackend(model, &backend);
    if (err == NULL) err = TRITONBACKEND_BackendState(backend, &backend_state);
    if (err == NULL) {
      const TRITONSERVER_Parameter* label = TRITONSERVER_ParameterNew("model", TRITONSERVER_PARAMETER_STRING, name);
      err = TRITONSERVER_MetricNew(&state->elements, ((BackendState*)backend_state)->elements, &label, 1);
      TRITONSERVER_ParameterDelete((TRITONSERVER_Parameter*)label);
    }
  }
  if (err != NULL) {
    free(state);
    return err;
  }
  return TRITONBACKEND_ModelSetState(model, state);
}

TRITONSERVER_Error* TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model* model) {
  void* vstate;
  RETURN_IF_ERROR(TRITONBACKEND_ModelState(model, &vstate));
  ModelState* state = vstate;
  TRITONSERVER_MetricDelete(state->elements);
  free(state);
  return NULL;
}

/* An FP32 input's shape, element count and data (in one buffer, in CPU memory). */
typedef struct {
  const int64_t* shape;
  uint32_t dims;
  uint64_t count;
  const float* data;
} Fp32Input;

static TRITONSERVER_Error* fp32_input(TRITONBACKEND_Request* request, const char* name, Fp32Input* out) {
  TRITONBACKEND_Input* input;
  RETURN_IF_ERROR(TRITONBACKEND_RequestInput(request, name, &input));
  TRITONSERVER_DataType datatype;
  uint64_t byte_size;
  uint32_t buffers;
  RETURN_IF_ERROR(TRITONBACKEND_InputProperties(input, NULL, &datatype, &out->shape, &out->dims, &byte_size, &buffers));
  if (datatype != TRITONSERVER_TYPE_FP32) {
    return error(TRITONSERVER_ERROR_INVALID_ARG, "vecop: input '%s' must be FP32", name);
  }
  if (buffers != 1) {
    return error(TRITONSERVER_ERROR_UNSUPPORTED, "vecop: input '%s' comes in several buffers", name);
  }
  const void* data;
  uint64_t size;
  TRITONSERVER_MemoryType memory;
  int64_t memory_id;
  RETURN_IF_ERROR(TRITONBACKEND_InputBuffer(input, 0, &data, &size, &memory, &memory_id));
  if (memory == TRITONSERVER_MEMORY_GPU) {
    return error(TRITONSERVER_ERROR_UNSUPPORTED, "vecop: input '%s' is in GPU memory", name);
  }
  out->data = data;
  out->count = size / sizeof(float);
  return NULL;
}

/* The request parameter `offset` (INT or DOUBLE), 0 without one. */
static TRITONSERVER_Error* offset_of(TRITONBACKEND_Request* request, double* offset) {
  uint32_t count;
  *offset = 0;
  RETURN_IF_ERROR(TRITONBACKEND_RequestParameterCount(request, &count));
  for (uint32_t i = 0; i < count; i++) {
    const char* key;
    TRITONSERVER_ParameterType type;
    const void* value;
    RETURN_IF_ERROR(TRITONBACKEND_RequestParameter(request, i, &key, &type, &value));
    if (strcmp(key, "offset") != 0) continue;
    if (type == TRITONSERVER_PARAMETER_INT) {
      *offset = (double)*(const int64_t*)value;
    } else if (type == TRITONSERVER_PARAMETER_DOUBLE) {
      *offset = *(const double*)value;
    } else {
      return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INVALID_ARG, "vecop: parameter 'offset' must be a number");
    }
  }
  return NULL;
}

/* Builds the response of one batched request: OUT = scale * (A + B) + offset. */
static TRITONSERVER_Error* add(ModelState* state, TRITONBACKEND_Request* request, TRITONBACKEND_Response* response,
                               uint64_t* elements) {
  Fp32Input a, b;
  double offset;
  RETURN_IF_ERROR(fp32_input(request, "A", &a));
  RETURN_IF_ERROR(fp32_input(request, "B", &b));
  RETURN_IF_ERROR(offset_of(request, &offset));
  if (a.dims != b.dims || memcmp(a.shape, b.shape, a.dims * sizeof(int64_t)) != 0 || a.count != b.count) {
    return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INVALID_ARG, "vecop: inputs 'A' and 'B' must have the same shape");
  }
  TRITONBACKEND_Output* output;
  RETURN_IF_ERROR(TRITONBACKEND_ResponseOutput(response, &output, "OUT", TRITONSERVER_TYPE_FP32, a.shape, a.dims));
  void* buffer;
  TRITONSERVER_MemoryType memory = TRITONSERVER_MEMORY_CPU;
  int64_t memory_id = 0;
  RETURN_IF_ERROR(TRITONBACKEND_OutputBuffer(output, &buffer, a.count * sizeof(float), &memory, &memory_id));
  float* out = buffer;
  for (uint64_t i = 0; i < a.count; i++) out[i] = (float)(state->scale * (a.data[i] + b.data[i]) + offset);
  *elements += a.count;
  return NULL;
}

/* Builds the response of one request of a sequence: OUT = ACC + scale * IN, where ACC is the
 * sequence's implicit state (zeros at its start, from `initial_state`), and OUT becomes the
 * state the sequence's next request gets as ACC. */
static TRITONSERVER_Error* accumulate(ModelState* state, TRITONBACKEND_Request* request,
                                      TRITONBACKEND_Response* response, uint64_t* elements) {
  Fp32Input in, acc;
  RETURN_IF_ERROR(fp32_input(request, "IN", &in));
  RETURN_IF_ERROR(fp32_input(request, "ACC", &acc));
  if (acc.count != in.count) {
    return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INVALID_ARG, "vecop: 'IN' and the state 'ACC' differ in size");
  }
  TRITONBACKEND_Output* output;
  void* out;
  void* next;
  TRITONSERVER_MemoryType memory = TRITONSERVER_MEMORY_CPU;
  int64_t memory_id = 0;
  RETURN_IF_ERROR(TRITONBACKEND_ResponseOutput(response, &output, "OUT", TRITONSERVER_TYPE_FP32, in.shape, in.dims));
  RETURN_IF_ERROR(TRITONBACKEND_OutputBuffer(output, &out, in.count * sizeof(float), &memory, &memory_id));
  TRITONBACKEND_State* next_state;
  RETURN_IF_ERROR(TRITONBACKEND_StateNew(&next_state, request, "ACC_NEXT", TRITONSERVER_TYPE_FP32, in.shape, in.dims));
  memory = TRITONSERVER_MEMORY_CPU;
  memory_id = 0;
  RETURN_IF_ERROR(TRITONBACKEND_StateBuffer(next_state, &next, in.count * sizeof(float), &memory, &memory_id));
  for (uint64_t i = 0; i < in.count; i++) {
    ((float*)out)[i] = acc.data[i] + state->scale * in.data[i];
    ((float*)next)[i] = ((float*)out)[i];
  }
  *elements += in.count;
  return TRITONBACKEND_StateUpdate(next_state);
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Reports one response sent through `factory` to the server's response statistics: its start,
 * the start of writing its outputs (0: it had none) and its end, and its error (NULL: none). */
static void report_response(TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_ResponseFactory* factory,
                            uint64_t start, uint64_t output_start, uint64_t end, TRITONSERVER_Error* failed) {
  TRITONBACKEND_ModelInstanceResponseStatistics* rs;
  TRITONSERVER_Error* err = TRITONBACKEND_ModelInstanceResponseStatisticsNew(&rs);
  if (err == NULL) {
    err = TRITONBACKEND_ModelInstanceResponseStatisticsSetModelInstance(rs, instance);
    if (err == NULL) err = TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseFactory(rs, factory);
    if (err == NULL) err = TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseStart(rs, start);
    if (err == NULL) err = TRITONBACKEND_ModelInstanceResponseStatisticsSetComputeOutputStart(rs, output_start);
    if (err == NULL) err = TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseEnd(rs, end);
    if (err == NULL) err = TRITONBACKEND_ModelInstanceResponseStatisticsSetError(rs, failed);
    if (err == NULL) err = TRITONBACKEND_ModelInstanceReportResponseStatistics(rs);
    TRITONBACKEND_ModelInstanceResponseStatisticsDelete(rs);
  }
  if (err != NULL) {
    LOG(TRITONSERVER_LOG_ERROR, TRITONSERVER_ErrorMessage(err));
    TRITONSERVER_ErrorDelete(err);
  }
}

/* Streams one decoupled request: one response per element of IN, then the final flag; each
 * response (the final flag alone as an empty one) is reported to the response statistics. */
static TRITONSERVER_Error* stream(ModelState* state, TRITONBACKEND_ModelInstance* instance,
                                  TRITONBACKEND_Request* request, uint64_t* elements) {
  Fp32Input in;
  RETURN_IF_ERROR(fp32_input(request, "IN", &in));
  /* Copy the input: the request (and its buffers) goes back to the server before the
   * responses are sent, as a decoupled backend answering from another thread would do. */
  float* values = malloc(in.count * sizeof(float) + 1);
  if (values == NULL) return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, "vecop: out of memory");
  memcpy(values, in.data, in.count * sizeof(float));
  uint64_t count = in.count;
  TRITONBACKEND_ResponseFactory* factory;
  TRITONSERVER_Error* err = TRITONBACKEND_ResponseFactoryNew(&factory, request);
  if (err != NULL) {
    free(values);
    return err;
  }
  TRITONBACKEND_RequestRelease(request, TRITONSERVER_REQUEST_RELEASE_ALL);
  const int64_t one = 1;
  for (uint64_t i = 0; i < count && err == NULL; i++) {
    TRITONBACKEND_Response* response;
    TRITONBACKEND_Output* output;
    void* buffer;
    TRITONSERVER_MemoryType memory = TRITONSERVER_MEMORY_CPU;
    int64_t memory_id = 0;
    const uint64_t start = now_ns();
    err = TRITONBACKEND_ResponseNewFromFactory(&response, factory);
    if (err != NULL) break;
    err = TRITONBACKEND_ResponseOutput(response, &output, "OUT", TRITONSERVER_TYPE_FP32, &one, 1);
    if (err == NULL) err = TRITONBACKEND_OutputBuffer(output, &buffer, sizeof(float), &memory, &memory_id);
    if (err == NULL) {
      const uint64_t output_start = now_ns();
      *(float*)buffer = state->scale * values[i];
      err = TRITONBACKEND_ResponseSend(response, 0, NULL);
      if (err == NULL) report_response(instance, factory, start, output_start, now_ns(), NULL);
    } else {
      TRITONBACKEND_ResponseDelete(response);
    }
  }
  *elements += count;
  free(values);
  const uint64_t start = now_ns();
  if (err != NULL) {
    /* The request is already released: the error goes to the client in a final response. */
    TRITONBACKEND_Response* response;
    if (TRITONBACKEND_ResponseNewFromFactory(&response, factory) == NULL &&
        TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, err) == NULL) {
      report_response(instance, factory, start, 0, now_ns(), err);
    }
    TRITONSERVER_ErrorDelete(err);
  } else if (TRITONBACKEND_ResponseFactorySendFlags(factory, TRITONSERVER_RESPONSE_COMPLETE_FINAL) == NULL) {
    report_response(instance, factory, start, 0, now_ns(), NULL);
  }
  TRITONBACKEND_ResponseFactoryDelete(factory);
  return NULL;
}

/* The items a request of a batching model (vecop_add) holds: its inputs' first dimension. */
static uint64_t batch_items(TRITONBACKEND_Request* request) {
  TRITONBACKEND_Input* a;
  const int64_t* shape = NULL;
  uint32_t dims = 0;
  TRITONSERVER_Error* err = TRITONBACKEND_RequestInput(request, "A", &a);
  if (err == NULL) err = TRITONBACKEND_InputProperties(a, NULL, NULL, &shape, &dims, NULL, NULL);
  if (err != NULL) {
    TRITONSERVER_ErrorDelete(err);
    return 1;
  }
  return dims > 0 && shape[0] > 0 ? (uint64_t)shape[0] : 1;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(
    TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests, const uint32_t request_count) {
  TRITONBACKEND_Model* model;
  void* vstate;
  RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceModel(instance, &model));
  RETURN_IF_ERROR(TRITONBACKEND_ModelState(model, &vstate));
  ModelState* state = vstate;
  uint64_t elements = 0;
  uint64_t batch_size = 0;
  const uint64_t exec_start = now_ns();
  if (state->delay_us > 0) usleep(state->delay_us);
  const uint64_t compute_start = now_ns();
  /* From here on every request is the backend's: each gets its answer and is released, and
   * Execute returns NULL (returning an error would give the requests back to the server). */
  for (uint32_t r = 0; r < request_count; r++) {
    TRITONBACKEND_Request* request = requests[r];
    if (state->decoupled) {
      TRITONSERVER_Error* err = stream(state, instance, request, &elements);
      if (err != NULL) {
        /* Nothing was sent and the request is still ours. */
        TRITONBACKEND_Response* response;
        if (TRITONBACKEND_ResponseNew(&response, request) == NULL) {
          TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, err);
        }
        TRITONSERVER_ErrorDelete(err);
        TRITONBACKEND_RequestRelease(request, TRITONSERVER_REQUEST_RELEASE_ALL);
      }
      continue;
    }
    TRITONBACKEND_Response* response;
    TRITONSERVER_Error* err = TRITONBACKEND_ResponseNew(&response, request);
    if (err == NULL) {
      TRITONSERVER_Error* failed = state->accumulate ? accumulate(state, request, response, &elements)
                                                     : add(state, request, response, &elements);
      /* A response carrying an error fails this request alone. */
      err = TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, failed);
      /* Its statistics, before the request is released: computed and answered at once. */
      const uint64_t done = now_ns();
      TRITONSERVER_Error* report = TRITONBACKEND_ModelInstanceReportStatistics(
          instance, request, failed == NULL && err == NULL, exec_start, compute_start, done, done);
      if (report != NULL) TRITONSERVER_ErrorDelete(report);
      if (failed == NULL) batch_size += state->accumulate ? 1 : batch_items(request);
      if (failed != NULL) TRITONSERVER_ErrorDelete(failed);
    }
    if (err != NULL) {
      LOG(TRITONSERVER_LOG_ERROR, TRITONSERVER_ErrorMessage(err));
      TRITONSERVER_ErrorDelete(err);
    }
    TRITONBACKEND_RequestRelease(request, TRITONSERVER_REQUEST_RELEASE_ALL);
  }
  if (elements > 0) TRITONSERVER_MetricIncrement(state->elements, (double)elements);
  if (!state->decoupled && batch_size > 0) {
    /* One execution of the batch's items (the requests that succeeded), as Triton's backends count. */
    const uint64_t end = now_ns();
    TRITONSERVER_Error* report =
        TRITONBACKEND_ModelInstanceReportBatchStatistics(instance, batch_size, exec_start, compute_start, end, end);
    if (report != NULL) TRITONSERVER_ErrorDelete(report);
  }
  return NULL;
}
