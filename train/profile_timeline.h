// A profile drawn as a timeline (trace.png): what a learner would see in chrome://tracing, as a
// picture that needs no browser.
#pragma once

#include <string>
#include <vector>

#include "engine/profiler.h"
#include "train/png.h"

namespace qkv::train {

// One lane for the phases (forward, backward, optimizer scopes), one for the issuing thread's ops
// and rules, one per pool worker; each event a box coloured by its op (the costliest ops named in
// a legend), a time axis in milliseconds. `max_ms` > 0 draws only the first max_ms.
Image trace_timeline(const std::vector<ProfileEvent>& events, const std::string& title,
                     double max_ms = 0);
void trace_timeline_png(const std::string& path, const std::vector<ProfileEvent>& events,
                        const std::string& title, double max_ms = 0);

}  // namespace qkv::train
