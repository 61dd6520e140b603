/* rrpc-doctor: the library's QoS classes (see doctor_classes.h). */
#include "doctor_classes.h"

#include "core/core.h"

int doctor_class_count(void)
{
    return RRPCI_MAX_CLASSES;
}

const char *doctor_class_name(int i)
{
    return rrpci_class_name(i);
}

int doctor_class_dscp(int i)
{
    return i >= 0 && i < RRPCI_MAX_CLASSES ? rrpci_class_defaults[i].dscp : -1;
}
