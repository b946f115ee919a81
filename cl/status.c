/* status.c - ct_status names and texts, the error record (ct__cl_fail for OpenCL failures), and
 * names of OpenCL / CLBlast codes. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <clblast_c.h>

#include "ct_cl_impl.h"

const char *ct_status_str(ct_status s) {
    switch (s) {
#define CT__STATUS_TEXT(name, value, text) \
    case name: return text;
        CT_STATUS_MAP(CT__STATUS_TEXT)
#undef CT__STATUS_TEXT
    }
    return "unknown status";
}

const char *ct_status_name(ct_status s) {
    switch (s) {
#define CT__STATUS_NAME(name, value, text) \
    case name: return #name;
        CT_STATUS_MAP(CT__STATUS_NAME)
#undef CT__STATUS_NAME
    }
    return "CT_UNKNOWN";
}

ct_status ct__err_set(ct_err *e, ct_status s, const char *file, int line, const char *fmt, ...) {
    if (!e) return s;
    e->status = s;
    e->file = file;
    e->line = line;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return s;
}

ct_status ct__cl_fail(ct_err *e, const char *file, int line, int code, const char *what, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, what);
    vsnprintf(buf, sizeof buf, what, ap);
    va_end(ap);
    ct_status s = (code == CL_MEM_OBJECT_ALLOCATION_FAILURE || code == CL_OUT_OF_RESOURCES ||
                   code == CL_INVALID_BUFFER_SIZE)
                      ? CT_ERR_DEVICE_MEM
                      : CT_ERR_OPENCL;
    return ct__err_set(e, s, file, line, "%s: %s (%d) [%s:%d]", buf, ct_cl_error_name(code), code,
                       file, line);
}

void ct_err_clear(ct_err *e) {
    if (!e) return;
    e->status = CT_OK;
    e->file = NULL;
    e->line = 0;
    e->msg[0] = '\0';
}

const char *ct_cl_error_name(int code) {
    switch (code) {
#define C(x) \
    case x: return #x;
        C(CL_SUCCESS) C(CL_DEVICE_NOT_FOUND) C(CL_DEVICE_NOT_AVAILABLE) C(CL_COMPILER_NOT_AVAILABLE)
        C(CL_MEM_OBJECT_ALLOCATION_FAILURE) C(CL_OUT_OF_RESOURCES) C(CL_OUT_OF_HOST_MEMORY)
        C(CL_PROFILING_INFO_NOT_AVAILABLE) C(CL_MEM_COPY_OVERLAP) C(CL_IMAGE_FORMAT_MISMATCH)
        C(CL_IMAGE_FORMAT_NOT_SUPPORTED) C(CL_BUILD_PROGRAM_FAILURE) C(CL_MAP_FAILURE)
        C(CL_MISALIGNED_SUB_BUFFER_OFFSET) C(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)
        C(CL_COMPILE_PROGRAM_FAILURE) C(CL_LINKER_NOT_AVAILABLE) C(CL_LINK_PROGRAM_FAILURE)
        C(CL_DEVICE_PARTITION_FAILED) C(CL_KERNEL_ARG_INFO_NOT_AVAILABLE) C(CL_INVALID_VALUE)
        C(CL_INVALID_DEVICE_TYPE) C(CL_INVALID_PLATFORM) C(CL_INVALID_DEVICE) C(CL_INVALID_CONTEXT)
        C(CL_INVALID_QUEUE_PROPERTIES) C(CL_INVALID_COMMAND_QUEUE) C(CL_INVALID_HOST_PTR)
        C(CL_INVALID_MEM_OBJECT) C(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR) C(CL_INVALID_IMAGE_SIZE)
        C(CL_INVALID_SAMPLER) C(CL_INVALID_BINARY) C(CL_INVALID_BUILD_OPTIONS) C(CL_INVALID_PROGRAM)
        C(CL_INVALID_PROGRAM_EXECUTABLE) C(CL_INVALID_KERNEL_NAME) C(CL_INVALID_KERNEL_DEFINITION)
        C(CL_INVALID_KERNEL) C(CL_INVALID_ARG_INDEX) C(CL_INVALID_ARG_VALUE) C(CL_INVALID_ARG_SIZE)
        C(CL_INVALID_KERNEL_ARGS) C(CL_INVALID_WORK_DIMENSION) C(CL_INVALID_WORK_GROUP_SIZE)
        C(CL_INVALID_WORK_ITEM_SIZE) C(CL_INVALID_GLOBAL_OFFSET) C(CL_INVALID_EVENT_WAIT_LIST)
        C(CL_INVALID_EVENT) C(CL_INVALID_OPERATION) C(CL_INVALID_GL_OBJECT)
        C(CL_INVALID_BUFFER_SIZE) C(CL_INVALID_MIP_LEVEL) C(CL_INVALID_GLOBAL_WORK_SIZE)
        C(CL_INVALID_PROPERTY)
#undef C
    case -1001: return "CL_PLATFORM_NOT_FOUND_KHR";
    }
    return "CL_UNKNOWN_ERROR";
}

const char *ct_clblast_error_name(int code) {
    switch (code) {
#define C(x) \
    case x: return #x;
        C(CLBlastSuccess) C(CLBlastOpenCLCompilerNotAvailable) C(CLBlastTempBufferAllocFailure)
        C(CLBlastOpenCLOutOfResources) C(CLBlastOpenCLOutOfHostMemory) C(CLBlastOpenCLBuildProgramFailure)
        C(CLBlastInvalidValue) C(CLBlastInvalidCommandQueue) C(CLBlastInvalidMemObject)
        C(CLBlastInvalidBinary) C(CLBlastInvalidBuildOptions) C(CLBlastInvalidProgram)
        C(CLBlastInvalidProgramExecutable) C(CLBlastInvalidKernelName) C(CLBlastInvalidKernelDefinition)
        C(CLBlastInvalidKernel) C(CLBlastInvalidArgIndex) C(CLBlastInvalidArgValue)
        C(CLBlastInvalidArgSize) C(CLBlastInvalidKernelArgs) C(CLBlastInvalidLocalNumDimensions)
        C(CLBlastInvalidLocalThreadsTotal) C(CLBlastInvalidLocalThreadsDim)
        C(CLBlastInvalidGlobalOffset) C(CLBlastInvalidEventWaitList) C(CLBlastInvalidEvent)
        C(CLBlastInvalidOperation) C(CLBlastInvalidBufferSize) C(CLBlastInvalidGlobalWorkSize)
        C(CLBlastNotImplemented) C(CLBlastInvalidMatrixA) C(CLBlastInvalidMatrixB)
        C(CLBlastInvalidMatrixC) C(CLBlastInvalidVectorX) C(CLBlastInvalidVectorY)
        C(CLBlastInvalidDimension) C(CLBlastInvalidLeadDimA) C(CLBlastInvalidLeadDimB)
        C(CLBlastInvalidLeadDimC) C(CLBlastInvalidIncrementX) C(CLBlastInvalidIncrementY)
        C(CLBlastInsufficientMemoryA) C(CLBlastInsufficientMemoryB) C(CLBlastInsufficientMemoryC)
        C(CLBlastInsufficientMemoryX) C(CLBlastInsufficientMemoryY)
        C(CLBlastInsufficientMemoryTemp) C(CLBlastInvalidBatchCount)
        C(CLBlastInvalidOverrideKernel) C(CLBlastMissingOverrideParameter)
        C(CLBlastInvalidLocalMemUsage) C(CLBlastNoHalfPrecision) C(CLBlastNoDoublePrecision)
        C(CLBlastInvalidVectorScalar) C(CLBlastInsufficientMemoryScalar) C(CLBlastDatabaseError)
        C(CLBlastUnknownError) C(CLBlastUnexpectedError)
#undef C
    }
    return ct_cl_error_name(code);
}
