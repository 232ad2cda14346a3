// Scoring a pool too big to stack: the members' prediction files read a block of rows at a time
// (loop/ensemble/prediction_stream.h) and scored by a per-sample strategy, holding one block
// per member instead of every member's whole file.
//
// Thread-safety: pure over its arguments and the files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "loop/ensemble/predictions.h"
#include "loop/ensemble/sample_measures.h"

namespace cohort::loop {

// Every pool sample's `measure` from the members' files (a passes file counting as its passes),
// read and scored a block at a time: the same scores as MeasureSamples over the stacked files.
Result<std::vector<double>> StreamScores(SampleMeasure measure,
                                         const std::vector<PoolSampleFile>& files, uint64_t rows,
                                         int64_t classes);

}  // namespace cohort::loop
