/*
 * iterate: an iterative sequence backend in C (Triton's "continuous/inflight batching"), the
 * example to copy for a backend that runs a request in several steps, sharing each execution
 * with the steps of other requests. Built as `<backend-directory>/iterate/libtriton_iterate.so`
 * by build.sh, it serves models whose config says `backend: "iterate"` and
 * `sequence_batching { iterative_sequence: true }`.
 *
 * A request's INT32 input IN is how many steps it takes. Each execution runs one step of each
 * request it holds; until its last step, the backend releases the request with
 * TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, and the server runs it again in a later execution
 * with the same inputs (START only on the first step, the same correlation ID). The backend
 * keeps each sequence's progress by correlation ID. Outputs: OUT = steps left, ITER = this step
 * (1, 2, ...), CORR = the correlation ID, FLAGS = the request's flags in this step.
 *
 * Decoupled (`model_transaction_policy { decoupled: true }`): one response per step, the last
 * with the final flag. Not decoupled: one response, at the last step. `execute_delay_ms` (a
 * model config parameter, default 0) pauses each execution, standing in for a step's work.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend_api.h"

#define LOG(level, msg) TRITONSERVER_LogMessage((level), __FILE__, __LINE__, (msg))
#define RETURN_IF_ERROR(expr)          \
  do {                                 \
    TRITONSERVER_Error* err__ = (expr); \
    if (err__ != NULL) return err__;   \
  } while (0)

/* The sequences in progress (a real backend would size this from max_candidate_sequences). */
#define MAX_SEQUENCES 64

typedef struct {
  uint64_t corr;
  int32_t left, done;
  bool used;
} Progress;

typedef struct {
  bool decoupled;
  useconds_t delay_us;
  pthread_mutex_t lock; /* instances of one model share the progress table */
  Progress sequences[MAX_SEQUENCES];
} ModelState;

TRITONSERVER_Error* TRITONBACKEND_Initialize(TRITONBACKEND_Backend* backend) {
  (void)backend;
  uint32_t major, minor;
  RETURN_IF_ERROR(TRITONBACKEND_ApiVersion(&major, &minor));
  if (major != BACKEND_API_VERSION_MAJOR || minor < BACKEND_API_VERSION_MINOR) {
    return TRITONSERVER_ErrorNew(
        TRITONSERVER_ERROR_UNSUPPORTED, "iterate: the server's backend API version does not support this backend");
  }
  return NULL;
}

/* The value after `"key":` in the model config's JSON (blanks skipped), or NULL. A real
 * backend uses a JSON library. */
static const char* json_value(const char* json, const char* key) {
  char quoted[128];
  snprintf(quoted, sizeof quoted, "\"%s\"", key);
  for (const char* p = strstr(json, quoted); p != NULL; p = strstr(p + 1, quoted)) {
    const char* v = p + strlen(quoted);
    while (*v == ' ' || *v == '\n') v++;
    if (*v++ != ':') continue;
    while (*v == ' ' || *v == '\n') v++;
    return v;
  }
  return NULL;
}

/* The model config's decoupled flag and `execute_delay_ms` parameter. */
static void read_config(const char* json, ModelState* state) {
  const char* decoupled = json_value(json, "decoupled");
  state->decoupled = decoupled != NULL && strncmp(decoupled, "true", 4) == 0;
  const char* delay = json_value(json, "execute_delay_ms");
  delay = delay != NULL ? json_value(delay, "string_value") : NULL;
  state->delay_us = delay != NULL && *delay == '"' ? (useconds_t)(atof(delay + 1) * 1000) : 0;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model* model) {
  TRITONSERVER_Message* message;
  RETURN_IF_ERROR(TRITONBACKEND_ModelConfig(model, 1, &message));
  const char* json;
  size_t size;
  TRITONSERVER_Error* err = TRITONSERVER_MessageSerializeToJson(message, &json, &size);
  ModelState* state = calloc(1, sizeof *state);
  if (err == NULL && state == NULL) err = TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, "iterate: out of memory");
  if (err == NULL) {
    read_config(json, state);
    pthread_mutex_init(&state->lock, NULL);
    err = TRITONBACKEND_ModelSetState(model, state);
  }
  TRITONSERVER_MessageDelete(message);
  if (err != NULL) free(state);
  return err;
}

TRITONSERVER_Error* TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model* model) {
  void* vstate;
  RETURN_IF_ERROR(TRITONBACKEND_ModelState(model, &vstate));
  ModelState* state = vstate;
  pthread_mutex_destroy(&state->lock);
  free(state);
  return NULL;
}

/* One step of a sequence: starts it (at START, or the first time its ID is seen) with `steps`
 * steps, then counts one. Fills `out` with its progress after the step; frees its entry at the
 * last step. */
static TRITONSERVER_Error* step(ModelState* state, uint64_t corr, uint32_t flags, int32_t steps, Progress* out) {
  pthread_mutex_lock(&state->lock);
  Progress* p = NULL;
  Progress* free_slot = NULL;
  for (int i = 0; i < MAX_SEQUENCES; i++) {
    Progress* s = &state->sequences[i];
    if (s->used && s->corr == corr) p = s;
    if (!s->used && free_slot == NULL) free_slot = s;
  }
  if (p == NULL) p = free_slot;
  if (p == NULL) {
    pthread_mutex_unlock(&state->lock);
    return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_UNAVAILABLE, "iterate: too many sequences in progress");
  }
  if (!p->used || (flags & TRITONSERVER_REQUEST_FLAG_SEQUENCE_START)) {
    *p = (Progress){.corr = corr, .left = steps, .done = 0, .used = true};
  }
  p->left--;
  p->done++;
  *out = *p;
  if (p->left <= 0) p->used = false;
  pthread_mutex_unlock(&state->lock);
  return NULL;
}

/* Drops a sequence's progress (its request was not rescheduled after all). */
static void forget(ModelState* state, uint64_t corr) {
  pthread_mutex_lock(&state->lock);
  for (int i = 0; i < MAX_SEQUENCES; i++) {
    if (state->sequences[i].used && state->sequences[i].corr == corr) state->sequences[i].used = false;
  }
  pthread_mutex_unlock(&state->lock);
}

/* Adds a one-element output (shape [1, 1] in a batching model, [1] otherwise). */
static TRITONSERVER_Error* output(TRITONBACKEND_Response* response, const char* name, TRITONSERVER_DataType datatype,
                                  const void* value, size_t size, bool batched) {
  const int64_t shape[2] = {1, 1};
  TRITONBACKEND_Output* out;
  void* buffer;
  TRITONSERVER_MemoryType memory = TRITONSERVER_MEMORY_CPU;
  int64_t memory_id = 0;
  RETURN_IF_ERROR(TRITONBACKEND_ResponseOutput(response, &out, name, datatype, shape, batched ? 2 : 1));
  RETURN_IF_ERROR(TRITONBACKEND_OutputBuffer(out, &buffer, size, &memory, &memory_id));
  memcpy(buffer, value, size);
  return NULL;
}

/* Runs one step of a request; says in `*again` whether it has steps left. */
static TRITONSERVER_Error* run(ModelState* state, TRITONBACKEND_Request* request, bool* again) {
  TRITONBACKEND_Input* in;
  const int64_t* shape;
  uint32_t dims;
  const void* data;
  uint64_t size;
  TRITONSERVER_MemoryType memory;
  int64_t memory_id;
  uint64_t corr;
  uint32_t flags;
  TRITONSERVER_DataType datatype;
  RETURN_IF_ERROR(TRITONBACKEND_RequestInput(request, "IN", &in));
  RETURN_IF_ERROR(TRITONBACKEND_InputProperties(in, NULL, &datatype, &shape, &dims, NULL, NULL));
  RETURN_IF_ERROR(TRITONBACKEND_InputBuffer(in, 0, &data, &size, &memory, &memory_id));
  if (datatype != TRITONSERVER_TYPE_INT32 || size != sizeof(int32_t)) {
    return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INVALID_ARG, "iterate: IN must be one INT32");
  }
  RETURN_IF_ERROR(TRITONBACKEND_RequestCorrelationId(request, &corr));
  RETURN_IF_ERROR(TRITONBACKEND_RequestFlags(request, &flags));
  Progress p;
  RETURN_IF_ERROR(step(state, corr, flags, *(const int32_t*)data, &p));
  *again = p.left > 0;
  if (*again && !state->decoupled) return NULL; /* not decoupled: one answer, at the last step */
  TRITONBACKEND_Response* response;
  RETURN_IF_ERROR(TRITONBACKEND_ResponseNew(&response, request));
  const bool batched = dims == 2;
  TRITONSERVER_Error* err = output(response, "OUT", TRITONSERVER_TYPE_INT32, &p.left, sizeof p.left, batched);
  if (err == NULL) err = output(response, "ITER", TRITONSERVER_TYPE_INT32, &p.done, sizeof p.done, batched);
  if (err == NULL) err = output(response, "CORR", TRITONSERVER_TYPE_UINT64, &corr, sizeof corr, batched);
  if (err == NULL) err = output(response, "FLAGS", TRITONSERVER_TYPE_UINT32, &flags, sizeof flags, batched);
  if (err != NULL) {
    TRITONBACKEND_ResponseDelete(response);
    return err;
  }
  return TRITONBACKEND_ResponseSend(response, *again ? 0 : TRITONSERVER_RESPONSE_COMPLETE_FINAL, NULL);
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(
    TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests, const uint32_t request_count) {
  TRITONBACKEND_Model* model;
  void* vstate;
  RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceModel(instance, &model));
  RETURN_IF_ERROR(TRITONBACKEND_ModelState(model, &vstate));
  ModelState* state = vstate;
  if (state->delay_us > 0) usleep(state->delay_us);
  for (uint32_t r = 0; r < request_count; r++) {
    bool again = false;
    TRITONSERVER_Error* err = run(state, requests[r], &again);
    if (err != NULL) {
      /* The request fails with the error, in a final response. */
      TRITONBACKEND_Response* response;
      if (TRITONBACKEND_ResponseNew(&response, requests[r]) == NULL) {
        TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, err);
      }
      TRITONSERVER_ErrorDelete(err);
      again = false;
    }
    if (again) {
      /* Steps left: the server runs it again later. A model that is not an iterative sequence
       * refuses; the request is then released as usual (and the server answers it). */
      err = TRITONBACKEND_RequestRelease(requests[r], TRITONSERVER_REQUEST_RELEASE_RESCHEDULE);
      if (err == NULL) continue;
      LOG(TRITONSERVER_LOG_ERROR, TRITONSERVER_ErrorMessage(err));
      TRITONSERVER_ErrorDelete(err);
      uint64_t corr = 0;
      if (TRITONBACKEND_RequestCorrelationId(requests[r], &corr) == NULL) forget(state, corr);
    }
    TRITONBACKEND_RequestRelease(requests[r], TRITONSERVER_REQUEST_RELEASE_ALL);
  }
  return NULL;
}
