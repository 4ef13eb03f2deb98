//! `TRITONBACKEND_ModelInstanceResponseStatistics`: a backend's own account of each response it
//! sends (Triton's response statistics, the `response_stats` of the statistics extension). The
//! backend fills an object with the instance, the request's response factory, its timestamps
//! and an error, and reports it; the report takes the factory's next response index (0, 1, …
//! per request, as Triton's `GetAndIncrementResponseIndex`) and goes to the model's sink, which
//! the server sets (`LoadedModel::on_response_statistics`). Where the figures are kept and
//! checked is the server's; this module only carries them.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::abi::*;
use super::boundary::{borrow, borrow_mut, export, write};
use super::error::Error;
use super::model::{Instance, Model};
use super::response::ResponseFactory;

/// How a reported response went, as Triton sorts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseOutcome {
    /// No error, with outputs (`compute_output_start` set).
    Success,
    /// No error and no outputs (`compute_output_start` 0): the final flag alone.
    Empty,
    /// An error with code CANCELLED.
    Cancel,
    /// Any other error.
    Fail,
}

/// One response as the backend reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseReport {
    /// Its index among its request's reported responses, from 0.
    pub index: u64,
    pub outcome: ResponseOutcome,
    pub response_start_ns: u64,
    /// 0 when no outputs were made.
    pub compute_output_start_ns: u64,
    pub response_end_ns: u64,
}

/// Where a model's response reports go; an `Err` (the figures are inconsistent) is the
/// report's INVALID_ARG error, with that text.
pub type ResponseStatsSink = Box<dyn Fn(ResponseReport) -> Result<(), String> + Send + Sync>;

/// What a `TRITONBACKEND_ModelInstanceResponseStatistics*` points to.
#[derive(Default)]
pub struct ResponseStatistics {
    /// The instance's model (whose sink takes the report).
    model: Option<Arc<Model>>,
    /// The factory's request's response index counter.
    factory: Option<Arc<super::response::Sink>>,
    response_start_ns: u64,
    compute_output_start_ns: u64,
    response_end_ns: u64,
    /// The error's code, if the backend set one (the error stays the backend's).
    error: Option<ErrorCode>,
}

/// Borrows the statistics object for a setter.
///
/// # Safety
/// `stats` must be null or an object made by `ResponseStatisticsNew`, not deleted, and not
/// used by another thread at the same time (the header's contract).
unsafe fn stats<'a>(stats: *mut ResponseStatistics) -> Result<&'a mut ResponseStatistics, Error> {
    // SAFETY: forwarded from the caller.
    unsafe { borrow_mut(stats, "response_statistics") }
}

export! {
    fn TRITONBACKEND_ModelInstanceResponseStatisticsNew(response_statistics: *mut *mut ResponseStatistics) {
        let new = Box::into_raw(Box::<ResponseStatistics>::default());
        // SAFETY: the caller's out-parameter.
        unsafe { write(response_statistics, new, "response_statistics") }
    }
}

export! {
    fn TRITONBACKEND_ModelInstanceResponseStatisticsDelete(response_statistics: *mut ResponseStatistics) {
        if !response_statistics.is_null() {
            // SAFETY: an object made by `ResponseStatisticsNew`, given up once.
            drop(unsafe { Box::from_raw(response_statistics) });
        }
        Ok(())
    }
}

export! {
    fn TRITONBACKEND_ModelInstanceResponseStatisticsSetModelInstance(response_statistics: *mut ResponseStatistics, model_instance: *mut Instance) {
        // SAFETY: a live instance object.
        let model = unsafe { borrow(model_instance, "model_instance") }?.model.clone();
        // SAFETY: the backend's statistics object.
        unsafe { stats(response_statistics) }?.model = Some(model);
        Ok(())
    }
}

export! {
    fn TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseFactory(response_statistics: *mut ResponseStatistics, response_factory: *mut ResponseFactory) {
        // SAFETY: a live response factory.
        let sink = unsafe { borrow(response_factory, "response_factory") }?.sink();
        // SAFETY: the backend's statistics object.
        unsafe { stats(response_statistics) }?.factory = Some(sink);
        Ok(())
    }
}

export! {
    fn TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseStart(response_statistics: *mut ResponseStatistics, response_start: u64) {
        // SAFETY: the backend's statistics object.
        unsafe { stats(response_statistics) }?.response_start_ns = response_start;
        Ok(())
    }
}

export! {
    fn TRITONBACKEND_ModelInstanceResponseStatisticsSetComputeOutputStart(response_statistics: *mut ResponseStatistics, compute_output_start: u64) {
        // SAFETY: the backend's statistics object.
        unsafe { stats(response_statistics) }?.compute_output_start_ns = compute_output_start;
        Ok(())
    }
}

export! {
    fn TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseEnd(response_statistics: *mut ResponseStatistics, response_end: u64) {
        // SAFETY: the backend's statistics object.
        unsafe { stats(response_statistics) }?.response_end_ns = response_end;
        Ok(())
    }
}

export! {
    /// Records the error's code; the error stays the backend's (null clears it).
    fn TRITONBACKEND_ModelInstanceResponseStatisticsSetError(response_statistics: *mut ResponseStatistics, error: *mut Error) {
        // SAFETY: a live error object or null.
        let code = unsafe { error.as_ref() }.map(|e| e.code);
        // SAFETY: the backend's statistics object.
        unsafe { stats(response_statistics) }?.error = code;
        Ok(())
    }
}

export! {
    /// Counts one response under its request's next response index, as Triton does.
    fn TRITONBACKEND_ModelInstanceReportResponseStatistics(response_statistics: *mut ResponseStatistics) {
        // SAFETY: the backend's statistics object.
        let s = unsafe { stats(response_statistics) }?;
        let model = s
            .model
            .as_ref()
            .ok_or_else(|| Error::new(ERROR_INVALID_ARG, "response statistics: the model instance is not set"))?;
        let factory = s
            .factory
            .as_ref()
            .ok_or_else(|| Error::new(ERROR_INVALID_ARG, "response statistics: the response factory is not set"))?;
        let outcome = match s.error {
            None if s.compute_output_start_ns > 0 => ResponseOutcome::Success,
            None => ResponseOutcome::Empty,
            Some(ERROR_CANCELLED) => ResponseOutcome::Cancel,
            Some(_) => ResponseOutcome::Fail,
        };
        let report = ResponseReport {
            index: factory.response_index.fetch_add(1, Ordering::Relaxed),
            outcome,
            response_start_ns: s.response_start_ns,
            compute_output_start_ns: s.compute_output_start_ns,
            response_end_ns: s.response_end_ns,
        };
        match model.response_stats.get() {
            Some(sink) => sink(report).map_err(|e| Error::new(ERROR_INVALID_ARG, e)),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_without_its_instance_is_refused_and_the_object_is_freed() {
        let mut rs = std::ptr::null_mut();
        // SAFETY: an out-parameter; then the object just made, used by this thread only.
        unsafe {
            assert!(TRITONBACKEND_ModelInstanceResponseStatisticsNew(&mut rs).is_null());
            assert!(TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseStart(rs, 5).is_null());
            let e = Error::from_raw(TRITONBACKEND_ModelInstanceReportResponseStatistics(rs)).unwrap();
            assert_eq!(
                (e.code, e.message()),
                (ERROR_INVALID_ARG, "response statistics: the model instance is not set")
            );
            let e = Error::from_raw(TRITONBACKEND_ModelInstanceResponseStatisticsSetModelInstance(
                rs,
                std::ptr::null_mut(),
            ));
            assert_eq!(e.unwrap().message(), "model_instance is null");
            assert!(TRITONBACKEND_ModelInstanceResponseStatisticsDelete(rs).is_null());
        }
    }
}
