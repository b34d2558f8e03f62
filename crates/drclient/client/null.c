/* The empty client: DynamoRIO's own cost (code cache, no instrumentation). */
#include "dr_api.h"

DR_EXPORT void dr_client_main(client_id_t id, int argc, const char *argv[])
{
    dr_set_client_name("splab null client", "");
}
