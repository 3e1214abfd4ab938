// The Flex Consumption plan and the Python function app.
//
// Flex Consumption, not Elastic Premium: Flex runs every trigger Casekeeper uses (HTTP, Service Bus
// with sessions, Cosmos DB change feed, timer), scales each non-HTTP function on its own
// (case_worker scales apart from the reconciler), scales to zero, and needs no Azure Files content
// share: the app package comes from a blob container read with the managed identity. Elastic
// Premium keeps its content on an Azure Files share whose setting
// (WEBSITE_CONTENTAZUREFILECONNECTIONSTRING) is an account-key connection string, which would force
// shared-key access back on for the storage account. No VNet is needed for any of it.
//
// On Flex, the runtime is set here in functionAppConfig.runtime (FUNCTIONS_WORKER_RUNTIME and
// linuxFxVersion are replaced), and FUNCTIONS_EXTENSION_VERSION is set by the platform (~4); the
// Functions docs list both app settings as deprecated for Flex, so neither is emitted.

param location string
param tags object
param planName string
param functionAppName string

@description('Resource id of the user-assigned identity the app runs as.')
param identityId string

@description('Client id of that identity: selects it for identity-based connections and DefaultAzureCredential.')
param identityClientId string

param storageAccountName string
param deploymentContainerName string
param applicationInsightsName string

@description('Python version. requirements.txt pins azure-functions 1.26.0 for Python 3.11-3.12 and 2.3.0 for 3.13.')
@allowed([
  '3.11'
  '3.12'
  '3.13'
])
param pythonVersion string = '3.13'

@description('Flex Consumption scale-out limit: the documented range is 1 to 1000.')
@minValue(1)
@maxValue(1000)
param maximumInstanceCount int = 40

@allowed([
  512
  2048
  4096
])
param instanceMemoryMB int = 2048

@description('Sessions one instance handles at once (the Service Bus extension\'s maxConcurrentSessions), overriding host.json\'s 8, which suits the local host\'s one SQLite file.')
@minValue(1)
param maxConcurrentSessions int = 16

@description('Always-ready instances, e.g. [{ name: \'function:case_worker\', instanceCount: 1 }] so the first message after idle is not delayed by a cold start.')
param alwaysReady array = []

@description('The application\'s own settings (names the code reads), name -> value.')
param appSettings object

@description('Client id of the Microsoft Entra ID app registration people sign in to the pages with (App Service Authentication). Empty: no sign-in, and the pages answer 401.')
param authClientId string = ''

// A note on PYTHON_ENABLE_OPENTELEMETRY below. host.json sets "telemetryMode": "OpenTelemetry". The
// setting lets the Python worker stream its own OpenTelemetry data, so the host stops forwarding the
// worker's logs (no duplicates), and makes the worker attach each invocation's trace context before the
// function runs, so the code's spans join the host's request. The code exports itself
// (shared/app/telemetry.configure, to Application Insights with the managed identity).
// PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY is deliberately not set: with it the worker would call
// configure_azure_monitor() itself, without the Entra credential this component requires
// (monitoring.bicep disables local auth), and the code's own call would configure it twice.
// (This note stands outside the list because the parser of the offline Bicep linter, pycep, fails on more
// than four comment lines in a row inside a block.)
// Settings the Functions host and the Azure SDKs read, added to the application's own.
var hostSettings = [
  // Host storage, identity-based: the host derives the blob/queue/table endpoints from the name.
  {
    name: 'AzureWebJobsStorage__accountName'
    value: storageAccountName
  }
  {
    name: 'AzureWebJobsStorage__credential'
    value: 'managedidentity'
  }
  {
    name: 'AzureWebJobsStorage__clientId'
    value: identityClientId
  }
  // Telemetry. The host authenticates with the identity; the component accepts nothing else when
  // monitoring.bicep disables local auth. The code reads the connection string too.
  {
    name: 'APPLICATIONINSIGHTS_CONNECTION_STRING'
    value: applicationInsights.properties.ConnectionString
  }
  {
    name: 'APPLICATIONINSIGHTS_AUTHENTICATION_STRING'
    value: 'ClientId=${identityClientId};Authorization=AAD'
  }
  // OpenTelemetry mode for the worker: see the note on PYTHON_ENABLE_OPENTELEMETRY above this list.
  {
    name: 'PYTHON_ENABLE_OPENTELEMETRY'
    value: 'true'
  }
  // host.json overridden for Azure (the host reads AzureFunctionsJobHost__<path> over host.json):
  // sessions per instance from the capacity model (docs/performance.md#capacity).
  {
    name: 'AzureFunctionsJobHost__extensions__serviceBus__maxConcurrentSessions'
    value: string(maxConcurrentSessions)
  }
  // azure-identity's DefaultAzureCredential (casekeeper/stores/cosmos.py, shared/messaging/servicebus.py,
  // shared/workflow/model_client.py, its async form) picks the user-assigned identity by this client id.
  {
    name: 'AZURE_CLIENT_ID'
    value: identityClientId
  }
]

// The loop runs over a parameter only, so its length is known when the deployment starts.
var applicationSettings = [
  for setting in items(appSettings): {
    name: setting.key
    value: setting.value
  }
]

resource storage 'Microsoft.Storage/storageAccounts@2023-05-01' existing = {
  name: storageAccountName
}

resource applicationInsights 'Microsoft.Insights/components@2020-02-02' existing = {
  name: applicationInsightsName
}

resource plan 'Microsoft.Web/serverfarms@2024-04-01' = {
  // checkov:skip=CKV_AZURE_225: zone redundancy on Flex Consumption depends on the region and bills an always-ready instance per zone; a production choice (docs), not a default
  name: planName
  location: location
  tags: tags
  kind: 'functionapp'
  sku: {
    name: 'FC1'
    tier: 'FlexConsumption'
  }
  properties: {
    reserved: true
  }
}

resource functionApp 'Microsoft.Web/sites@2024-04-01' = {
  // checkov:skip=CKV_AZURE_222: the ERP's webhooks and the people's pages reach the app over the internet; callers are authenticated by signature, function key or Entra ID
  // checkov:skip=CKV_AZURE_17: client certificates would lock out the webhook senders, which sign each request with the shared HMAC secret instead
  // checkov:skip=CKV_AZURE_212: Flex Consumption scales out per function on demand; the alwaysReady parameter keeps a floor of instances for the case worker
  // checkov:skip=CKV_AZURE_213: App Service health check replaces instances of dedicated and Premium plans; a Flex Consumption app has no such instances to replace
  name: functionAppName
  location: location
  tags: union(tags, {
    'azd-service-name': 'casekeeper'
  })
  kind: 'functionapp,linux'
  identity: {
    type: 'UserAssigned'
    userAssignedIdentities: {
      '${identityId}': {}
    }
  }
  properties: {
    serverFarmId: plan.id
    httpsOnly: true
    publicNetworkAccess: 'Enabled'
    // Key Vault references (WEBHOOK_SECRET, ALERT_WEBHOOK_URL, AZURE_OPENAI_API_KEY) resolve with the user-assigned identity.
    keyVaultReferenceIdentity: identityId
    siteConfig: {
      minTlsVersion: '1.2'
      http20Enabled: true
      // The package is deployed from blob storage (functionAppConfig.deployment): nothing uses FTP.
      ftpsState: 'Disabled'
      appSettings: concat(applicationSettings, hostSettings)
    }
    functionAppConfig: {
      deployment: {
        storage: {
          type: 'blobContainer'
          value: '${storage.properties.primaryEndpoints.blob}${deploymentContainerName}'
          authentication: {
            type: 'UserAssignedIdentity'
            userAssignedIdentityResourceId: identityId
          }
        }
      }
      scaleAndConcurrency: {
        maximumInstanceCount: maximumInstanceCount
        instanceMemoryMB: instanceMemoryMB
        alwaysReady: alwaysReady
      }
      runtime: {
        name: 'python'
        version: pythonVersion
      }
    }
  }
}

// App Service Authentication (Easy Auth) with Microsoft Entra ID, for the approval and operations pages.
//
// unauthenticatedClientAction is AllowAnonymous, not RedirectToLoginPage, on purpose: the machine API
// (POST /api/events, signed with the webhook secret; the approval, withdrawal and case endpoints,
// called with function keys) is used by programs that have no Entra ID sign-in, and a platform-wide
// redirect or 401 would lock them out. So the platform signs people in where they ask to, and passes
// who they are in X-MS-CLIENT-PRINCIPAL (removing any such header a client sent); the pages themselves
// refuse a request without a principal (redirecting a browser to /.auth/login/aad) or without the
// app role they need (403): Casekeeper.Approver to answer approvals, Casekeeper.Operator for /api/ops.
// The code trusts that header only while this is on (WEBSITE_AUTH_ENABLED, set by the platform).
//
// No client secret: the platform signs in with the OpenID Connect ID token (the app registration must
// issue ID tokens), whose roles claim carries the app roles assigned to the person.
// The checkov skips in this resource: it is the authsettingsV2 configuration of the site, not a site, yet
// checkov applies its web-app checks to it (reading properties it does not have), and CKV_AZURE_70 crashes
// on it. The site itself is checked above.
resource authSettings 'Microsoft.Web/sites/config@2024-04-01' = if (!empty(authClientId)) {
  parent: functionApp
  // checkov:skip=CKV_AZURE_66: not a site (authsettingsV2 config); failed-request tracing is a site log setting
  // checkov:skip=CKV_AZURE_63: not a site (authsettingsV2 config); telemetry goes to Application Insights
  // checkov:skip=CKV_AZURE_222: not a site (authsettingsV2 config); public access of the site is judged above
  // checkov:skip=CKV_AZURE_80: not a site (authsettingsV2 config); the app is Python, no .NET Framework
  name: 'authsettingsV2'
  // checkov:skip=CKV_AZURE_13: this resource IS App Service Authentication; the check looks for it inside a site
  // checkov:skip=CKV_AZURE_88: not a site (authsettingsV2 config); Flex Consumption deploys from blob storage
  // checkov:skip=CKV_AZURE_65: not a site (authsettingsV2 config); detailed errors are a site log setting
  // checkov:skip=CKV_AZURE_70: not a site (authsettingsV2 config); httpsOnly is set on the site above
  properties: {
    platform: {
      enabled: true
    }
    globalValidation: {
      requireAuthentication: false
      unauthenticatedClientAction: 'AllowAnonymous'
    }
    httpSettings: {
      requireHttps: true
    }
    identityProviders: {
      azureActiveDirectory: {
        enabled: true
        registration: {
          clientId: authClientId
          openIdIssuer: '${environment().authentication.loginEndpoint}${tenant().tenantId}/v2.0'
        }
        validation: {
          allowedAudiences: [
            authClientId
            'api://${authClientId}'
          ]
        }
      }
    }
    // No token store: the pages only need who signed in (X-MS-CLIENT-PRINCIPAL), never the person's
    // tokens, and a token store without a configured blob container has nowhere to keep them.
    login: {
      tokenStore: {
        enabled: false
      }
    }
  }
}

output name string = functionApp.name
output defaultHostName string = functionApp.properties.defaultHostName
