// What every Env user shares, built on Env's virtual operations (and so on whichever Env,
// the POSIX one or a fault-injecting one, is passed in).
#include "store/env.h"

#include "common/file_util.h"

namespace cohort::store {

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  if (dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

Status WriteFileAtomically(Env* env, const std::string& path, std::string_view contents) {
  const std::string tmp = path + ".tmp";
  COHORT_ASSIGN_OR_RETURN(auto file, env->NewWritableFile(tmp));
  COHORT_RETURN_IF_ERROR(file->Append(contents));
  COHORT_RETURN_IF_ERROR(file->Sync());
  COHORT_RETURN_IF_ERROR(file->Close());
  COHORT_RETURN_IF_ERROR(env->RenameFile(tmp, path));
  return env->SyncDir(ParentDir(path));
}

}  // namespace cohort::store
