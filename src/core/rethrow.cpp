#include "core/rethrow.h"

#include "tessera/error.h"
#include "tessera/graph.h"
#include "tessera/sync_guard.h"

namespace tessera::detail {

void rethrow_reworded(const std::exception_ptr& error,
                      const std::function<std::string(const std::string&)>& reword) {
  // Most derived first: a catch of a base would take its subclasses.
  try {
    std::rethrow_exception(error);
  } catch (const DeviceMismatchError& e) {
    throw DeviceMismatchError(reword(e.what()));
  } catch (const DeviceError& e) {
    throw DeviceError(reword(e.what()));
  } catch (const ShapeError& e) {
    throw ShapeError(reword(e.what()));
  } catch (const DtypeError& e) {
    throw DtypeError(reword(e.what()));
  } catch (const OutOfMemoryError& e) {
    throw OutOfMemoryError(reword(e.what()));
  } catch (const IOError& e) {
    throw IOError(reword(e.what()));
  } catch (const IndexError& e) {
    throw IndexError(reword(e.what()));
  } catch (const GraphCaptureError& e) {
    throw GraphCaptureError(reword(e.what()));
  } catch (const SyncError& e) {
    throw SyncError(reword(e.what()));
  } catch (const NonFiniteError& e) {
    throw NonFiniteError(reword(e.what()));
  } catch (const Error& e) {
    throw Error(reword(e.what()));
  }
  std::rethrow_exception(error);  // anything else, as it was
}

}  // namespace tessera::detail
